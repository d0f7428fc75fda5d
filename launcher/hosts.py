"""--hosts / --hostfile -> ordered (host, slots) -> rank placement."""
import click

from commlib._hosts import (SRUN_RSH, is_local, parse_hostfile, parse_hosts, place,  # noqa: F401 -- commrun's names
                            slurm_allocation)


class HostsType(click.ParamType):
    name = "HOST[:SLOTS],..."

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        try:
            return parse_hosts(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)
