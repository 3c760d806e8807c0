"""``convert`` and ``--weights``: a DeepSeek checkpoint's tensors for a case (``convert.py``), read lazily through
the contract's checkpoint reader and converted to the spec's W8A8 with the error measured against the
checkpoint's own math; ``load`` gives ``check``, ``run`` and ``bench`` the same weights, ``convert`` writes them."""
