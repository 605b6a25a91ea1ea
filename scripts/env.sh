# Environment for running spark-trident: Spark 4 wants Java 17.
if [ -z "${JAVA_HOME:-}" ]; then
  for d in /usr/lib/jvm/java-17-openjdk-*; do [ -d "$d" ] && export JAVA_HOME="$d" && break; done
fi
export PYTHONHASHSEED="${PYTHONHASHSEED:-0}"
