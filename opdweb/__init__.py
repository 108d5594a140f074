"""opdweb: the control room for on-policy distillation rollout configurations."""
