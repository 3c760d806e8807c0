"""The MTP tail's kernels in two frontends with one interface (see ``frontend.py``).

- ``tir``: hand-written TensorIR (TVMScript) kernels, called from Relax through ``call_tir``;
- ``relax``: Relax operators (plus TE where Relax has no operator), legalised and fused by TVM.
"""
