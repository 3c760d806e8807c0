"""``dumps``: reading the run folders a build leaves under ``dumps/``: listing, showing and diffing passes and
one function's history (``browse.py``), and two runs aligned pass by pass, their first divergence and its diff,
as text or an HTML page from ``templates/`` (package data) (``compare.py``)."""
