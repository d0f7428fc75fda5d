"""Rendezvous: where ranks find each other, and the job's control channel.

- `discovery`: which job this process is in (rank, size, coordinator,
  secret), from commrun, srun, mpirun/mpiexec, torchrun or Kubernetes
  variables, explicit arguments, or a shared key-value store;
- `coordinator`: the service every rank registers with; it tells each rank
  the hosts of all and the addresses of its likely peers (the rest on
  request: `table`) and pushes "rank k died/left/lost" notices for the
  job's life;
- `client`: a rank's authenticated connection to it;
- `framing`: the handshake and the length-prefixed JSON messages both ends
  speak (the HMAC proof and exact read are `_auth`'s, shared with the
  transport).
"""
from .client import Client
from .coordinator import Coordinator
from .service import Service
from .table import Table
from .discovery import (JobEnv, discover, expand_nodelist, explicit, via_key_value, warn_if_derived,
                        weak_secret_words)

__all__ = ["Client", "Coordinator", "JobEnv", "discover", "expand_nodelist", "explicit", "via_key_value",
           "warn_if_derived", "weak_secret_words", "Service", "Table"]
