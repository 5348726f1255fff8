"""Every scenario the harness can run, by name: each topic's module lists its own."""
from faults import clocks, disks, membership, network, scenarios

SCENARIOS = {}
for module in (scenarios, clocks, disks, membership, network):
    for name, scenario in module.SCENARIOS.items():
        assert name not in SCENARIOS, name
        SCENARIOS[name] = scenario
