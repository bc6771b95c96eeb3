"""`specviz` opens the app; `specviz distill ...` trains a draft for a target."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "distill":
        from .distill.train import main as distill_main

        return distill_main(args[1:])
    if args and args[0] == "cli":
        from .cli import main as cli_main

        return cli_main(args[1:])
    from .gui.windows.qt_check import check

    problem = check()  # before Qt starts: it would abort with its raw plugin error
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    try:
        from .gui.windows.app import main as app_main

        return app_main(args)
    except KeyboardInterrupt:  # Ctrl+C before the window's own handler is in place
        print("specviz: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
