"""The one line a failed job prints names the error the task raised, not a line of source
the traceback quotes."""

from kappa_ingest.errors import KafkaUnavailable, LockLost
from kappa_ingest.spark.failures import classify

TRACEBACK = """org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/x/kappa_ingest/sinks/confluent_sink.py", line 301, in _txn
    except KafkaException as e:
  File "/x/kappa_ingest/sinks/writers.py", line 362, in commit
    producer.commit(wait)
cimpl.KafkaException: KafkaError{code=_TIMED_OUT,val=-185,str="Transactional API operation (commit_transaction) timed out"}
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:572)
"""


def test_the_raised_error_is_named_not_a_quoted_source_line():
    e = classify(RuntimeError(TRACEBACK))
    assert isinstance(e, KafkaUnavailable)
    assert "as e:" not in str(e)
    assert "KafkaException: KafkaError{code=_TIMED_OUT" in str(e)


def test_a_task_error_of_ours_wins_over_kafkas_named_earlier():
    text = TRACEBACK.replace(
        "cimpl.KafkaException: KafkaError", "kappa_ingest.sinks.producer.DeliveryFailed: 3 records"
    )
    assert str(classify(RuntimeError(text))).startswith("3 records")


def test_a_quoted_except_clause_alone_is_no_kafka_error():
    text = (
        '  File "/x/sinks/confluent_sink.py", line 301, in _txn\n    except KafkaException as e:\njava.io.EOFException'
    )
    assert "as e:" not in str(classify(RuntimeError(text)))


def test_an_error_without_a_message_is_named_not_the_traceback_header():
    text = TRACEBACK.replace(
        'cimpl.KafkaException: KafkaError{code=_TIMED_OUT,val=-185,str="Transactional API operation'
        ' (commit_transaction) timed out"}',
        "TimeoutError",
    )
    e = classify(RuntimeError("An exception was thrown from the Python worker. Please see the stack trace below.\n"
                              + text))  # fmt: skip
    assert str(e) == "the Spark job failed: TimeoutError (raised at sinks/writers.py:362 in commit)"


def test_a_kafka_unavailable_raised_in_a_task_keeps_its_exit_code():
    # As a task reading the ledger of a paused broker raised it (the fault test's traceback).
    text = TRACEBACK.replace(
        'cimpl.KafkaException: KafkaError{code=_TIMED_OUT,val=-185,str="Transactional API operation'
        ' (commit_transaction) timed out"}',
        "kappa_ingest.errors.KafkaUnavailable: Kafka did not let the delivery ledger '_kappa_ingest_ledger' be read"
        " to its end in time",
    )
    e = classify(RuntimeError(text))
    assert isinstance(e, KafkaUnavailable) and e.exit_code == 4
    assert str(e) == "Kafka did not let the delivery ledger '_kappa_ingest_ledger' be read to its end in time"


def test_a_run_taken_over_is_not_told_to_resume_what_the_other_run_sends():
    """A task stopped because another run superseded this one: the splits this run did not
    deliver are the other run's, so the hint is not ``--resume``; any other failure's is."""
    from kappa_ingest.pipeline.accounting import with_resume_hint
    from kappa_ingest.report.run import RunReport

    report = RunReport("cut-off", "confluent", "t", {})
    report.ledger["missing"] = ["a.csv [0, 10)", "b.csv [0, 10)"]
    superseded = classify(
        RuntimeError("kappa_ingest.sinks.producer.RunSuperseded: run cut-off was taken over by run s")
    )
    line = str(with_resume_hint(superseded, report))
    assert isinstance(superseded, LockLost) and "--resume" not in line and "the other run" in line, line
    line = str(with_resume_hint(classify(RuntimeError(TRACEBACK)), report))
    assert "--resume cut-off sends its 2 missing splits" in line, line


def test_the_stores_failures_in_a_task_keep_their_exit_codes():
    """A store out of reach mid-read (ours, or pyarrow's own after its retries): exit 4; an
    object overwritten since the plan: exit 3, each its one line."""
    from kappa_ingest.errors import InputError
    from kappa_ingest.s3.access import StoreUnavailable

    def raised(line: str) -> str:
        return TRACEBACK.replace(
            'cimpl.KafkaException: KafkaError{code=_TIMED_OUT,val=-185,str="Transactional API operation'
            ' (commit_transaction) timed out"}',
            line,
        )

    ours = classify(RuntimeError(raised("kappa_ingest.s3.access.StoreUnavailable: input s3://b/k: the store at"
                                        " http://h:9 did not answer (curlCode 7)")))  # fmt: skip
    assert isinstance(ours, StoreUnavailable) and ours.exit_code == 4 and str(ours).startswith("input s3://b/k:")
    arrow = classify(RuntimeError(raised("OSError: When reading from 'b/k': AWS Error NETWORK_CONNECTION during"
                                         " GetObject operation: curlCode: 28, Timeout was reached")))  # fmt: skip
    assert isinstance(arrow, StoreUnavailable) and "the object store failed while a task read its split" in str(arrow)
    changed = classify(RuntimeError(raised("kappa_ingest.s3.objects.ObjectChanged: input s3://b/k was overwritten"
                                           " after the run planned it")))  # fmt: skip
    assert type(changed) is InputError and changed.exit_code == 3 and str(changed).startswith("input s3://b/k was")


CHAINED = """org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/x/pyarrow/_s3fs.pyx", line 1, in open_input_file
OSError: When reading information for key 'in.csv' in bucket 'gone': AWS Error NO_SUCH_BUCKET during HeadObject operation

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/kappa_ingest/s3/objects.py", line 40, in opened
    raise store_error(e) from e
kappa_ingest.errors.InputError: s3://gone/in.csv: no such bucket; check --input
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:572)
"""


def test_a_chained_error_is_named_by_the_error_raised_not_its_cause():
    """``raise InputError(...) from e``: the traceback prints the store's OSError first; the
    run's exit code and line are the InputError's (3), not a store failure's (4)."""
    from kappa_ingest.errors import InputError

    e = classify(RuntimeError(CHAINED))
    assert isinstance(e, InputError) and e.exit_code == 3
    assert str(e) == "s3://gone/in.csv: no such bucket; check --input"
    during = CHAINED.replace("The above exception was the direct cause of the following exception:",
                             "During handling of the above exception, another exception occurred:")  # fmt: skip
    assert isinstance(classify(RuntimeError(during)), InputError)


# An error kappa-ingest does not know, as the traceback's last frames and line give it.
UNKNOWN = (
    '  File "/venv/lib/python3.11/site-packages/kappa_ingest/sinks/batch.py", line 88, in send\n'
    "    here = os.getcwd()\n"
    "FileNotFoundError: [Errno 2] No such file or directory\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:572)\n"
)
TOLD = (
    "the Spark job failed: FileNotFoundError: [Errno 2] No such file or directory (raised at sinks/batch.py:88 in send)"
)


def test_an_error_unknown_to_us_is_told_with_the_frame_that_raised_it():
    text = (
        "org.apache.spark.api.python.PythonException: An exception was thrown from the Python worker.\n"
        "Traceback (most recent call last):\n"
        '  File "/w/pyspark.zip/pyspark/worker.py", line 1900, in main\n    process()\n' + UNKNOWN
    )
    assert str(classify(RuntimeError(text))) == TOLD


def test_an_rdd_tasks_error_is_told_by_its_traceback_too():
    """An RDD job's failure (the producers' send) carries the JVM's PythonException with the
    traceback alone, not pyspark's "Python worker" wording."""
    text = (
        "An error occurred while calling o95.collectAndServe.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 3.0 failed 4 times,"
        " most recent failure: Lost task 1.3 in stage 3.0 (TID 9) (localhost executor driver):"
        " org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n" + UNKNOWN
    )
    assert str(classify(RuntimeError(text))) == TOLD
