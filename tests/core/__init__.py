"""Tests of the pure core (longcall.core): table, machine, policies, purity."""
