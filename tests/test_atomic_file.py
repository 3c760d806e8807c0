import pytest

from mtp_tvm.support.atomic_file import atomic_write, write_text, write_user_file
from mtp_tvm.support.errors import UsageError


def test_a_write_lands_whole_and_leaves_no_temp_file(tmp_path):
    write_text(tmp_path / "a.json", "{}")
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"] and (tmp_path / "a.json").read_text() == "{}"


def test_a_failed_write_keeps_the_old_file_and_removes_the_temp_one(tmp_path):
    (tmp_path / "a.json").write_text("old")

    def fail_halfway(tmp):
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(tmp_path / "a.json", fail_halfway)
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"] and (tmp_path / "a.json").read_text() == "old"
    with pytest.raises(UsageError, match=r"^cannot write report .*a\.json: No space left on device$"):
        write_user_file(tmp_path / "a.json", fail_halfway, what="report ")
