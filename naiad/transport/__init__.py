"""Transports between workers: in-process queues, and ZeroMQ between processes and hosts."""

from naiad.transport.inproc import LocalFabric

__all__ = ["LocalFabric"]
