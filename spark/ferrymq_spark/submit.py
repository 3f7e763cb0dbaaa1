"""spark-submit entry point of the audit jobs (copied into the image as /opt/ferrymq/submit.py).

``spark-submit ... submit.py backlog --snapshots DIR --out DIR`` runs exactly what
``ferrymq report backlog`` runs; under spark-submit the session keeps the submitted master.
"""

from __future__ import annotations


def main() -> None:
    from ferrymq.cli.report import report_app

    report_app(prog_name="submit.py")


if __name__ == "__main__":
    main()
