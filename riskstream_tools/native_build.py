"""Builds the compiled core (streaming.native) in place: the modules mypyc compiles and the
hand-written C beside them. `make setup` runs
`python -m riskstream_tools.native_build ensure`, which builds unless the build is current; a
build that fails there (no C compiler, say) leaves the package pure Python with a message
instead of stopping the setup. `build` always raises. Build-time only: the runtime never
imports mypyc or setuptools."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from mypyc.build import mypycify
from setuptools import Extension, setup  # type: ignore[import-untyped]

from streaming import native
from streaming.native import COMPILED, GROUP, MANIFEST, ROOT


def build(opt_level: str = "3") -> dict[str, Path]:
    """Compile the set in place and record the sources' hashes. Raises on failure (a type
    error the compiler rejects, or no C compiler); the package then stays pure Python."""
    clean()
    sources = [str(native.source_path(m).relative_to(ROOT)) for m in COMPILED]
    cwd = os.getcwd()
    os.chdir(ROOT)  # mypyc names modules by their path from the working directory
    try:
        hand_written = [Extension(m, [c_source], extra_compile_args=[f"-O{opt_level}"])
                        for m, c_source in native.HAND_WRITTEN.items()]
        setup(name="riskstream-native",
              ext_modules=[*mypycify(sources, opt_level=opt_level, group_name=GROUP),
                           *hand_written],
              script_args=["--quiet", "build_ext", "--inplace", "--build-temp", "build/native",
                           "--build-lib", "build/native-lib"])
    finally:
        os.chdir(cwd)
    built = native.extension_files()
    missing = [m for m in native.built_modules() if m not in built]
    if missing:
        raise RuntimeError(f"the native build did not produce {', '.join(missing)}")
    MANIFEST.write_text(json.dumps({"sources": native.source_hashes()}, indent=1) + "\n")
    return built


def clean() -> None:
    """Remove the manifest and every extension module in the package (the build's and any left
    by an earlier build of a longer list); the package then runs pure Python."""
    MANIFEST.unlink(missing_ok=True)
    for path in native.extension_files().values():
        path.unlink()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "status"
    if command == "ensure" and native.decide("auto") == "compiled":
        print("native core: compiled and current")
    elif command in ("build", "ensure"):
        print(f"native core: compiling {len(COMPILED)} modules with mypyc (about 30 s)")
        try:
            built = build()
        except (Exception, SystemExit) as exc:  # noqa: BLE001  (setuptools exits on errors)
            if command == "build":
                raise
            # `make setup` goes on: the same code runs as Python. CI still fails, as its
            # check that the set is compiled does (tests/test_native.py).
            clean()
            print(f"native core: NOT BUILT ({exc.__class__.__name__}: {exc}); the package runs "
                  "pure Python. `python -m riskstream_tools.native_build build` shows the "
                  "compiler's output.", file=sys.stderr)
            return 0
        print(f"native core: compiled {len(COMPILED)} modules ({len(built)} files)")
    elif command == "clean":
        clean()
        print("native core: removed; the package runs pure Python")
    elif command == "status":
        print(f"native core: {native.decide(os.environ.get(native.ENV_VAR, 'auto'))}")
    else:
        print("usage: python -m riskstream_tools.native_build [build|ensure|clean|status]",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
