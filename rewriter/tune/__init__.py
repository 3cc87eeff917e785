"""Accuracy after rewriting and quantisation: recover (distillation), QAT, pre-quantisation
rewrites, and int8 range starvation."""
