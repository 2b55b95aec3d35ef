"""The machine we run on: probes of what could make timings untrustworthy, the rule that
calls a machine shared, how this process was launched, and the metadata stored with every
study (one collector)."""
