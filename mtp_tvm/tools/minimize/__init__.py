"""``minimize``: a module file that fails ``check --module`` cut down to the smallest piece of its exported graph
that still fails, written as a module file of its own (``minimize.py``; it starts from ``check``'s
``localize``, against eager torch)."""
