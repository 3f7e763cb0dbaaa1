#!/usr/bin/env bash
# Runs the Spark job and report tests (tests/spark) under pandas 3 in a throwaway venv.
#
# The lock pins pandas 2.x (scripts/lock-overrides.txt: PySpark 4.x supports pandas 2 and warns
# under pandas 3); the reports must work with both. This venv takes constraints.txt without its
# pandas line, plus pandas>=3, and installs this tree editable, so it tests the working copy.
#
# Usage: spark/test-pandas3.sh [pytest args...]   (default: tests/spark)
#   VENV   where the venv goes (default /tmp/ferrymq-venv-pandas3; reused when present)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-/tmp/ferrymq-venv-pandas3}
if [ ! -x "$VENV/bin/pytest" ]; then
  python3.11 -m venv "$VENV"
  grep -v '^pandas==' "$ROOT/constraints.txt" >"$VENV/constraints-no-pandas.txt"
  "$VENV/bin/pip" install -q -c "$VENV/constraints-no-pandas.txt" -e "$ROOT[spark,dev]" "pandas>=3,<4"
fi
"$VENV/bin/python" -c 'import pandas, sys; v = pandas.__version__; print("pandas", v); sys.exit(v[0] != "3")'
cd "$ROOT"
[ $# -gt 0 ] || set -- tests/spark
SPARK_LOCAL_IP=127.0.0.1 exec "$VENV/bin/pytest" -q -p no:cacheprovider "$@"
