"""The method core: answer groups, per-question arrays and features, the switch model q, votes,
DeepConf, γ calibration, the stopping rules (MARS, MARS2 and the baselines), the method registry,
the settings and the evaluation protocols."""
