try:
    from .cli import entry
except KeyboardInterrupt:
    # Ctrl-C while the command's modules load, before main() takes signals over: under
    # `python -m` CPython would print the traceback and exit 1; ours is one line and 130
    import os
    import sys

    print("hybridsched: interrupted", file=sys.stderr, flush=True)
    os._exit(130)

entry()
