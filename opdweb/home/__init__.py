"""The team's home page (``/``): what needs the person now (approvals waiting for them,
open alerts, runs past their budget, failed jobs), what ran since their last visit, and
each recent config's next step from a check to an export.  Reads only; nothing else
imports it."""
