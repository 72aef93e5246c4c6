"""`python -m benchmarks run [--quick] [...]`: the benchmark suite (`benchmarks/suite.py`); `list` names the workloads."""

import sys


USAGE = """usage: python -m benchmarks {run,list} [options]

  run    run the suite (python -m benchmarks run --help for its options)
  list   print the workloads"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    from benchmarks import suite

    command, rest = argv[0], argv[1:]
    if command == "run":
        return suite.main(rest)
    if command == "list":
        print("\n".join(suite.WORKLOADS))
        return 0
    print(f"unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
