import os
import stat
import subprocess
import sys
import threading

import numpy as np
import pytest

from mtp_tvm.support.atomic_file import (
    NAME_MAX,
    atomic_write,
    make_temp_dir,
    remove_stale,
    replace_dir,
    require_writable,
    temp_prefix,
    write_text,
    write_user_file,
)
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


# ---- fault injection: special files at the output path, concurrent writers, a kill at every write step --------



def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    write_text(tmp_path / "link.json", "new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_fifo_is_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    write_text(fifo, "through the pipe")
    reader.join(timeout=30)
    assert got == ["through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_a_character_device_is_written_into_not_replaced():
    write_text("/dev/null", "discarded")  # as root, a rename would put a regular file over the device node
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_folder_at_the_path_is_refused_not_replaced(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(UsageError, match=r"^cannot write .*d: Is a directory$"):
        write_user_file(tmp_path / "d", lambda tmp: tmp.write_text("x"))
    assert (tmp_path / "d").is_dir() and [p.name for p in tmp_path.iterdir()] == ["d"]


def test_a_new_file_gets_the_mode_open_would_give_and_a_replaced_one_keeps_its_mode(tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    write_text(tmp_path / "new", "x")
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o666 & ~umask
    os.chmod(tmp_path / "new", 0o600)
    write_text(tmp_path / "new", "y")
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o600


def test_concurrent_threads_writing_one_path_never_corrupt_it(tmp_path):
    from mtp_tvm.compiler.arrays import read_npz, write_npz

    out = tmp_path / "out.npz"
    arrays = [{"a": np.full((256, 256), i, np.float32)} for i in range(8)]
    threads = [threading.Thread(target=write_npz, args=(out, a)) for a in arrays]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = read_npz(out, {})["a"]
    assert (got == got.flat[0]).all() and [p.name for p in tmp_path.iterdir()] == ["out.npz"]


WRITER = """
import sys, numpy as np
from mtp_tvm.compiler.arrays import write_npz
for _ in range(10):
    write_npz(sys.argv[1], {"a": np.full((128, 128), int(sys.argv[2]), np.float32)})
"""


@pytest.mark.slow  # over 10 s on 2 cores
def test_concurrent_processes_writing_one_path_all_succeed_and_leave_one_whole_file(tmp_path, prefork):
    from mtp_tvm.compiler.arrays import read_npz

    out = tmp_path / "out.npz"
    procs = [subprocess.Popen([*prefork.python, "-c", WRITER, str(out), str(i)], stderr=subprocess.PIPE)
             for i in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs), [p.stderr.read() for p in procs]
    got = read_npz(out, {})["a"]
    assert (got == got.flat[0]).all() and [p.name for p in tmp_path.iterdir()] == ["out.npz"]


@pytest.mark.parametrize("step", range(3))
def test_an_interrupt_at_every_write_step_keeps_the_old_file_and_leaves_no_temp(tmp_path, step):
    (tmp_path / "a.json").write_text("old")

    def write(tmp):
        with open(tmp, "w") as f:
            for i in range(3):
                if i == step:
                    raise KeyboardInterrupt
                f.write("part")

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "a.json", write)
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"] and (tmp_path / "a.json").read_text() == "old"


def test_replace_dir_swaps_whole_folders_and_puts_back_one_it_may_not_replace(tmp_path):
    dest, new = tmp_path / "dest", tmp_path / "new"
    new.mkdir()
    (new / "v").write_text("1")
    replace_dir(new, dest, lambda _p: True)
    assert (dest / "v").read_text() == "1" and not new.exists()
    new.mkdir()
    (new / "v").write_text("2")
    with pytest.raises(FileExistsError):
        replace_dir(new, dest, lambda _p: False)
    assert (dest / "v").read_text() == "1" and (new / "v").read_text() == "2"
    replace_dir(new, dest, lambda _p: True)
    assert (dest / "v").read_text() == "2" and sorted(p.name for p in tmp_path.iterdir()) == ["dest"]


def test_litter_of_dead_processes_is_removed_and_a_live_writers_is_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    out = tmp_path / "art"
    (tmp_path / f".art.partial-{dead.stdout.strip()}-x").mkdir()
    live = tmp_path / f"{temp_prefix(out, 'partial')}y"
    live.mkdir()
    assert [p.name for p in remove_stale(out, "partial")] == [f".art.partial-{dead.stdout.strip()}-x"]
    assert [p.name for p in tmp_path.iterdir()] == [live.name]


def test_a_temp_folder_gets_the_mode_mkdir_would_give(tmp_path):
    """mkdtemp makes 0700; a folder renamed into place (an artifact, a reproducer) must be as readable as one
    ``mkdir`` makes, so another user or a service account can load a deployed binary."""
    from mtp_tvm.support.atomic_file import make_temp_dir

    umask = os.umask(0o022)
    try:
        made = make_temp_dir(".x-", tmp_path)
        (tmp_path / "plain").mkdir()
    finally:
        os.umask(umask)
    assert stat.S_IMODE(made.stat().st_mode) == 0o755 == stat.S_IMODE((tmp_path / "plain").stat().st_mode)
    assert made.parent == tmp_path and made.name.startswith(".x-")


def test_remove_own_temps_removes_this_process_s_temps_only(tmp_path):
    from mtp_tvm.support.atomic_file import make_temp_dir, remove_own_temps, temp_prefix

    mine = temp_prefix(tmp_path / "out", "partial")
    make_temp_dir(mine, tmp_path)
    (tmp_path / f"{mine}file").write_text("x")
    other = tmp_path / ".out.partial-1-abc"  # another (dead) writer's: remove_stale's job, not this one's
    other.mkdir()
    (tmp_path / "out").mkdir()
    remove_own_temps(mine, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.partial-1-abc", "out"]


def test_a_legal_long_name_is_written_and_a_name_too_long_is_one_line(tmp_path):
    """A 250-byte name is legal, so its hidden temp name must be too; a 300-byte one is refused before any work."""
    legal = tmp_path / ("\u00e9" * 124 + ".npz")  # 252 bytes of UTF-8
    write_text(legal, "x")
    assert legal.read_text() == "x" and [p.name for p in tmp_path.iterdir()] == [legal.name]
    assert len(os.fsencode(temp_prefix(legal, "partial"))) + 12 <= NAME_MAX
    folder = make_temp_dir(temp_prefix(tmp_path / ("d" * 250), "partial"), tmp_path)
    assert remove_stale(tmp_path / ("d" * 250), "partial") == [] and folder.exists()  # a live writer's: kept
    for too_long in (tmp_path / ("a" * 300), tmp_path / ("a" * 300) / "b.npz"):
        with pytest.raises(UsageError, match=r"^cannot write --out .*(over the 255|File name too long)") as e:
            require_writable(too_long, "--out")
        assert len(str(e.value).splitlines()) == 1
