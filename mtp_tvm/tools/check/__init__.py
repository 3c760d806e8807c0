"""``check`` and what it does when a build fails: a case or a user's module file built, run and golden-checked
(``check.py``: one verb, a strategy per kind), the reproducer folder that re-checks a failure without the session
(``repro.py``: one writer and one ``rerun`` for both kinds), and the search for the first wrong kernel: every
kernel call of ``main`` recorded with its arguments and a NaN's origin (``kernel_calls.py``), two builds' calls
compared (``localize.py``), a module file's calls against its torch graph op by op, named by the op and source
line (``torch_reference.py``: localize's reference for a module file), and the first differing call written out
as a one-kernel reproducer (``kernel_repro.py``)."""
