"""For the test drivers: a streaming query that failed because Spark's new Python worker did not
connect back within Spark's fixed 10 s is started again from its checkpoint, as a job scheduler
would start a failed driver again (``odradek pipeline run --restarts`` does it for the pipelines).

On the loaded machine of a whole test run (four test workers, their JVMs, standalone and broker
clusters) a worker's start has taken longer than that; the query then fails before it reads
anything, and Spark starts no failed query again.  Only that failure is retried, a bounded number
of times; any other failure ends the job as it would have.
"""

from typing import Any

#: the message of Spark's failure (``PythonWorkerFactory``: SocketTimeoutException)
WORKER_DID_NOT_CONNECT = "Python worker failed to connect back"
RESTARTS = 3


def worker_did_not_start(error: Any) -> bool:
    """Whether ``error`` (a query's ``exception()``) is Spark's Python worker start failure."""
    return error is not None and WORKER_DID_NOT_CONNECT in str(error)


def await_briefly(query: Any, seconds: float) -> None:
    """``awaitTermination(seconds)``; a failure it raises is left for ``query.exception()``."""
    try:
        query.awaitTermination(seconds)
    except Exception:
        if query.exception() is None:
            raise
