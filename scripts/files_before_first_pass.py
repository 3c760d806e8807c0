"""How many mtp_tvm files a command runs code from before the compiler's first pass (issue 43's measure of how
far a command travels through the package before the work starts): every mtp_tvm file with a function called
(module bodies run at import included) until the pass recorder's ``run_before_pass``.

    python scripts/files_before_first_pass.py [CHECKOUT] [-- mtp-tvm arguments]

defaults: this checkout, ``check --case logits --preset tiny``. Prints the count, then the files on stderr."""

import os
import sys

args = sys.argv[1:]
root = os.path.abspath(args.pop(0) if args and args[0] != "--" else os.path.join(os.path.dirname(__file__), ".."))
argv = args[args.index("--") + 1:] if "--" in args else ["check", "--case", "logits", "--preset", "tiny"]
sys.path.insert(0, root)
package = os.path.join(root, "mtp_tvm")
files: set[str] = set()
first_pass = False


def _watch(frame, event, _arg):
    global first_pass
    if event != "call" or first_pass or not frame.f_code.co_filename.startswith(package):
        return
    if frame.f_code.co_name == "run_before_pass":
        first_pass = True
        return
    files.add(os.path.relpath(frame.f_code.co_filename, root))


from mtp_tvm.cli import main  # noqa: E402  (after the checkout is first on the path)

sys.setprofile(_watch)
try:
    main(argv)
finally:
    sys.setprofile(None)
print(len(files))
print("\n".join(sorted(files)), file=sys.stderr)
