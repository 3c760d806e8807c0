"""``bisect``: the numeric search for the optional pass or the schedule-trace step that breaks a check, over a
case or a module file (``bisection.py``), and how a search walks its candidates, named without TVM for the CLI's
``--search`` (``search.py``)."""
