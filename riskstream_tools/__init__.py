"""riskstream tooling: seed workloads, reference oracles, demos, benchmarks, evidence packets and
incident packets. Built on the runtime (`streaming`), never imported by it; its CLI commands are
registered through the `riskstream.commands` entry points."""
