"""The driver layer: carries out core commands through adapters and the ledger."""
