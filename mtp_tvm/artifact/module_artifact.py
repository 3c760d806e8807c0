"""What the artifact of a user's module file (``build("FILE.py", ...)``, ``build --module FILE.py --out DIR``) says
it is (``module_identity``, the manifest's identity for ``artifact.export.build``): the binary and manifest of a
case's artifact, plus the file's example inputs (parameters included) and their reference outputs, so that ``run`` and
``check --artifact`` need neither the file nor torch: the golden of a torch model can only be recomputed with the
model, so it is computed once at build time and stored (``reference_outputs.npz``); the manifest records the
file's path and sha256, so that ``bench --artifact`` can run the file's model as the peers only while it is unchanged.
"""

from __future__ import annotations

from pathlib import Path

from ..artifact.manifest import sha256_file
from ..artifact.module_reference import EXAMPLE_INPUTS, REFERENCE_OUTPUTS
from ..compiler.arrays import write_npz
from ..compiler.module_build import CompiledModule
from ..contract.presets import NO_PRESET
from ..verify.module_golden import module_golden


def module_identity(compiled: CompiledModule, folder: Path) -> dict:
    """The manifest's account of a module file's binary; writes its example inputs and reference outputs."""
    user = compiled.module_file
    write_npz(folder / EXAMPLE_INPUTS, dict(user.examples))
    write_npz(folder / REFERENCE_OUTPUTS, module_golden(compiled))
    reference = ("torch, eagerly" if user.kind == "torch"
                 else "the module built for the CPU with no schedule and no optional pass")
    return {"case": user.name, "description": f"module file {user.path.name} ({user.kind})", "preset": NO_PRESET,
            "frontend": compiled.frontend, "shapes": user.example_shapes,
            "symbolic_dims": {d: "a symbolic size of the module" for d in user.symbolic_dims},
            "module": {"path": str(user.path), "sha256": sha256_file(user.path), "kind": user.kind,
                       "num_input": user.num_input, "returns_tuple": user.returns_tuple,
                       "example_inputs": EXAMPLE_INPUTS, "reference_outputs": REFERENCE_OUTPUTS, "reference": reference,
                       "dim_bounds": {d: list(b) for d, b in user.dim_bounds.items()},
                       "dim_names": dict(user.dim_names)}}
