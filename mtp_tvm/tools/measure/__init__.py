"""Measurement that ``check``, ``bench`` and ``dumps`` share: every kernel of ``main`` timed against the roofline
(``profile.py``), this machine's peaks and read bandwidth measured by our own kernels (``peaks.py``), the one
roofline model both ``bench`` and ``profile`` judge by (``roofline.py``: useful FLOPs and bytes, the peak of the
instruction each GEMM runs on), and per-kernel instruction counts of the generated code (``kernel_code.py``)."""
