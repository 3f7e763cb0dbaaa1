#!/bin/bash
# Entrypoint of the ferrymq Spark image (spark/k8s/Dockerfile).
#
# Spark on Kubernetes starts its pods with the image's entrypoint and the arguments `driver ...`
# or `executor` (settings in SPARK_* variables); anything else is a ferrymq command line, so
# `docker run IMAGE report --help` and the operator's audit CronJob work as with the other images.
set -euo pipefail

spark_home() {
  # PySpark from PyPI carries Spark (jars, bin/) inside the package.
  SPARK_HOME=${SPARK_HOME:-$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}
  export SPARK_HOME
}

case "${1:-}" in
  driver)
    shift
    spark_home
    # The submitting side already chose cluster mode; inside the driver pod Spark runs in client
    # mode, bound to the pod's address (the node's own on the host network).
    exec "$SPARK_HOME/bin/spark-submit" --deploy-mode client \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:?set by Spark}" "$@"
    ;;
  executor)
    shift
    spark_home
    # Spark passes the executor's JVM options as SPARK_JAVA_OPT_0, _1, ... (in that order).
    java_opts=()
    for i in $(seq 0 999); do
      var="SPARK_JAVA_OPT_$i"
      [ -n "${!var+x}" ] || break
      java_opts+=("${!var}")
    done
    exec "${JAVA_HOME:-/usr}/bin/java" "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY:?}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}$SPARK_HOME/jars/*" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL:?}" --executor-id "${SPARK_EXECUTOR_ID:?}" \
      --cores "${SPARK_EXECUTOR_CORES:?}" --app-id "${SPARK_APPLICATION_ID:?}" \
      --hostname "${SPARK_EXECUTOR_POD_IP:?}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:-}"
    ;;
  *)
    exec ferrymq "$@"
    ;;
esac
