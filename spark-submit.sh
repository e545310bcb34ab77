#!/usr/bin/env bash
# spark-submit for kappa-ingest jobs: passes every spark-submit option through and adds
# only what the job needs: its package (the Kafka sink), lib/ zipped for executors,
# conf/spark-defaults.conf, the log4j2 config and an ivy settings file naming Maven Central.
#
#   ./spark-submit.sh [spark-submit option ...] jobs/ingest_csv.py --input PATH --topic TOPIC [option ...]
#
# Executors need the Python dependencies too (confluent-kafka is a native wheel): on a
# cluster, ship a packed venv with --archives (README, "Submitting to a cluster"). The C
# record loops travel built, inside the zip: executors need no C compiler.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${KAPPA_VENV:-$here/.venv}
spark_submit=${SPARK_SUBMIT:-$venv/bin/spark-submit}
[[ -x $spark_submit ]] || { echo "spark-submit.sh: no spark-submit at $spark_submit; run 'make setup' or set SPARK_SUBMIT" >&2; exit 2; }

mkdir -p "$here/build"
"$venv/bin/python" - "$here/lib" "$here/build/kappa_ingest.zip" <<'PY'
import os, sys, zipfile
from kappa_ingest import native
lib, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(out + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
    for root, dirs, files in os.walk(os.path.join(lib, "kappa_ingest")):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "built", "conf")]
        for f in files:
            if f.endswith((".py", ".c", ".h")):
                path = os.path.join(root, f)
                z.write(path, os.path.relpath(path, lib))
    # The shipped producer settings, for a driver that has no checkout (cluster deploy mode).
    z.write(os.path.join(lib, "..", "conf", "ingest.yaml"), "kappa_ingest/conf/ingest.yaml")
    try:
        built = native.build()
        z.write(built, f"kappa_ingest/native/c/built/{built.name}")
    except native.NativeUnavailable as e:
        print(f"spark-submit.sh: {e}; executors without a C compiler will use the Python fallback", file=sys.stderr)
os.replace(out + ".tmp", out)
PY

props=(--properties-file "$here/conf/spark-defaults.conf")
# spark.pyspark.python (the executors' Python from a packed venv) would also become the
# driver's, a path that exists only on executors: the driver runs this venv's Python.
driver=(--conf "spark.pyspark.driver.python=${PYSPARK_DRIVER_PYTHON:-$venv/bin/python}")
for arg in "$@"; do
  [[ $arg == --properties-file* ]] && props=()
  [[ $arg == spark.pyspark.driver.python=* ]] && driver=()
done
log4j="-Dlog4j2.configurationFile=file:$here/conf/log4j2-spark.properties"
# Arrow's index checks off for the vectors Spark writes for Python (kappa_ingest.spark.session).
java_opts="$log4j -Darrow.enable_unsafe_memory_access=true"

export KAPPA_INGEST_HOME=$here
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
export PYSPARK_PYTHON=${PYSPARK_PYTHON:-$venv/bin/python}
export PYSPARK_DRIVER_PYTHON=${PYSPARK_DRIVER_PYTHON:-$venv/bin/python}
exec "$spark_submit" \
  "${props[@]}" "${driver[@]}" \
  --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0 \
  --conf "spark.jars.ivySettings=$here/conf/ivysettings.xml" \
  --conf "spark.driver.extraJavaOptions=$java_opts" \
  --conf "spark.executor.extraJavaOptions=$java_opts" \
  --py-files "$here/build/kappa_ingest.zip" \
  --jars "$("$venv/bin/python" -m kappa_ingest.kafka.interceptor)" \
  "$@"
