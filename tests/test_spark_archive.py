"""The driver JVM maps the class-data-sharing archive platform/setup.sh makes (platform/spark_archive.py).

A session with the archive starts in about half the time (benchmarks/RESULTS.md); a missing archive must
leave sessions as they were, and one that does not match Spark's classpath would be silently ignored by
the JVM, so the suite checks the session the assets started really can map it.
"""

from __future__ import annotations

from resources.spark import DRIVER_ARCHIVE, DriverJvm, spark_config


def test_the_archive_is_added_to_the_driver_options_only_when_it_exists(tmp_path):
    archive = tmp_path / "driver.jsa"
    without = spark_config("local[2]", env={}, archive=archive)
    assert "SharedArchiveFile" not in without.get("spark.driver.extraJavaOptions", "")
    archive.write_bytes(b"made by platform/spark_archive.py")
    options = spark_config("local[2]", env={}, archive=archive)["spark.driver.extraJavaOptions"]
    assert options.endswith(f"-XX:SharedArchiveFile={archive}")
    assert options.startswith(without["spark.driver.extraJavaOptions"])  # platform/spark.yaml's options kept
    # A Spark Connect server owns its JVM: the client asks nothing of it.
    assert "SharedArchiveFile" not in str(spark_config("sc://localhost:15002", env={}, archive=archive))


def test_the_assets_session_maps_the_archive_with_sparks_own_classpath(spark):
    assert DRIVER_ARCHIVE.is_file(), "platform/setup.sh makes the archive; see .venv/spark-archive.log"
    jvm = spark._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={DRIVER_ARCHIVE}" in arguments
    assert "sharing" in jvm.java.lang.System.getProperty("java.vm.info")
    # The JVM ignores an archive whose classpath does not match, without a word: a JVM started like the
    # session's, with -Xshare:on, must map it.
    result = DriverJvm.of(jvm).maps(DRIVER_ARCHIVE)
    assert result.returncode == 0, result.stderr[-2000:]
