"""Private Flower names for the legacy fit messages (``FitIns`` / ``FitRes`` <-> ``RecordDict``).

fedspectral builds and reads training messages directly in the layout Flower's legacy
(``NumPyClient`` / ``Strategy``) stack uses (:mod:`fl_strategies.protocol.fit_records`), so that a message
it writes is one Flower's own ``GridClientProxy`` and ``NumPyClient`` would write. That layout is
defined only by these private converters; flwr 1.41 has no public equivalent.
"""

from __future__ import annotations

from flwr.compat.client.numpy_client import EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_FIT
from flwr.compat.common import recorddict_compat
from flwr.compat.common.recorddict_compat import _check_mapping_from_recordscalartype_to_scalar

__all__ = ["EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_FIT", "check_mapping_from_recordscalartype_to_scalar",
           "recorddict_compat"]

# recorddict_compat : module ``flwr.compat.common.recorddict_compat``
#   What: Flower's converters between the legacy ``FitIns`` / ``FitRes`` / ``Parameters`` and the Message
#   API's ``RecordDict`` / ``ArrayRecord`` (``fitins_to_recorddict``, ``recorddict_to_fitres``,
#   ``fitres_to_recorddict``, ``arrayrecord_to_parameters``, ``parameters_to_arrayrecord``).
#   Why: fit_records writes and reads fit messages in exactly Flower's layout (both sides) and falls back to
#   these converters for anything it does not special-case; client_app.faults rewrites a reply's FitRes;
#   simulations.bench_messages times Flower's own path against fit_records.
#   Public alternative: none in 1.41 (the legacy <-> Message conversion happens inside ``ClientApp`` /
#   ``GridClientProxy`` only). Moving to the Message API (``flwr.serverapp.strategy`` + ``flwr.clientapp``
#   with ``ArrayRecord`` content) would remove the need.

# EXCEPTION_MESSAGE_WRONG_RETURN_TYPE_FIT : str, from ``flwr.compat.client.numpy_client``
#   What: the ``TypeError`` message Flower's NumPyClient wrapper raises when ``fit`` returns the wrong type.
#   Why: fit_records.fit_reply_content runs a NumPyClient's ``fit`` without Flower's wrapper and must fail
#   with the same message.
#   Public alternative: none (a copy of the string would drift silently on upgrade).

check_mapping_from_recordscalartype_to_scalar = _check_mapping_from_recordscalartype_to_scalar
"""``flwr.compat.common.recorddict_compat._check_mapping_from_recordscalartype_to_scalar`` (underscore name).

What: turns a reply's ``MetricRecord`` into the ``dict[str, Scalar]`` a ``FitRes`` carries (and checks the
value types), as ``recorddict_to_fitres`` does. Why: fit_records.fitres_from_content builds the ``FitRes``
itself (to decode the arrays once) and must give the same metrics dict. Public alternative: none
(``dict(metric_record)`` gives the same values without the type check).
"""
