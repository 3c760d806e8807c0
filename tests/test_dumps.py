import json
import re

import mtp_tvm
from mtp_tvm.pipeline import RELAX_PHASES, TIR_PHASES

DUMP_NAME = re.compile(r"^(\d{3})_([a-z-]+)__(.+)\.(py|diff)$")


def test_dump_passes_writes_one_numbered_file_per_pass(tmp_path):
    m = mtp_tvm.compile(case="tail", preset="tiny", frontend="relax", dump_passes=tmp_path)
    run = m.dump_dir
    assert run.parent == tmp_path and run.name.startswith("tail-llvm-")
    assert (run / "complete").exists() and "def main(" in (run / "000_input.py").read_text()
    index = json.loads((run / "index.json").read_text())
    passes = index["passes"]
    assert [p["index"] for p in passes] == list(range(1, len(passes) + 1))
    phases = {p["phase"] for p in passes}
    assert {"legalize", "fuse", "lower-dataflow", "finalize", "tir-lower", "tir-host"} <= phases
    assert phases <= {ph.name for ph in RELAX_PHASES} | set(TIR_PHASES)
    names = [p["name"] for p in passes]
    assert "sequential" not in names and not any(n.startswith("mtp.") for n in names)
    assert "LegalizeOps" in names and "FuseTIR" in names and "tirx.MakePackedAPI" in names
    for p in passes:
        assert (run / p["file"]).exists()
        m_ = DUMP_NAME.match(p["file"])
        assert m_ and int(m_.group(1)) == p["index"] and m_.group(2) == p["phase"]
        assert (p["diff"] is not None) == p["changed"]
    legalize = next(p for p in passes if p["name"] == "LegalizeOps")
    assert legalize["changed"] and legalize["lines_added"] > 0


def test_only_changed_and_two_runs_never_share_a_folder(tmp_path):
    a = mtp_tvm.compile(case="logits", preset="tiny", dump_passes=tmp_path, only_changed=True).dump_dir
    b = mtp_tvm.compile(case="logits", preset="tiny", dump_passes=tmp_path).dump_dir
    assert a != b
    ia, ib = (json.loads((r / "index.json").read_text())["passes"] for r in (a, b))
    assert len(ia) == len(ib)  # unchanged passes are still in the index ...
    assert all(p["file"] is None for p in ia if not p["changed"])  # ... but have no file
    assert len(list(a.glob("*.py"))) < len(list(b.glob("*.py")))
