"""Parts of bench/overhead.py: upstream and forwarder (standalone scripts run as their own
processes), the load generator, the arms, child processes, the report and the targets."""
