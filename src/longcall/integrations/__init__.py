"""Integrations of longcall's server library into other frameworks' servers.

Owns: adapters that let an application written for another MCP framework keep its code
and gain longcall's durable task store. Must not: hold a task engine of its own (each
adapter drives ``longcall.server``'s task manager and store), and nothing in longcall
imports this package: it is imported only by applications that opt in.
"""
