"""``check`` and what it does when a build fails: a case built, run and golden-checked (``check.py``), a user's
module file the same way (``module_check.py``), the reproducer folder that re-checks a failure without the
session (``repro.py``; a module file's: ``module_repro.py``), and the search for the first wrong kernel: every
kernel call of ``main`` recorded with its arguments and a NaN's origin (``kernel_calls.py``), two builds' calls
compared (``localize.py``), a module file's calls against its torch graph op by op, named by the op and source
line (``module_localize.py``), and the first differing call written out as a one-kernel reproducer
(``kernel_repro.py``)."""
