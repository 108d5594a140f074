"""opdweb's native client: the documented HTTP API only, the standard library only.

``opdweb login`` / ``submit`` / ``status`` / ``wait`` / ``export`` on the command line
(:mod:`.cli`), :class:`Client` for the same from Python, and :class:`Run` for a trainer
that logs to neither MLflow nor W&B: ``run.log(step, {key: value})`` queues points that a
background thread sends in batches, retried with backoff until the server has them, and
flushed when the process exits.
"""
from opdweb_client.credentials import Credentials, load_credentials
from opdweb_client.jobs import TERMINAL_STATES, Client
from opdweb_client.run import Run
from opdweb_client.transport import ApiError, Backoff, NotLoggedIn, OpdwebError

__all__ = ["ApiError", "Backoff", "Client", "Credentials", "NotLoggedIn", "OpdwebError", "Run", "TERMINAL_STATES",
           "load_credentials"]
