"""What is built from data, above the stages: the neighbour index (`indexing`, from the
reference cases read by the stages: `references`), the static embedding (`distil`) and the
message atlas (`harvest`, from the libraries' source). The calibration and the learned model
are fitted by `bench/eval_corpus.py --write-calibration` on the same reference cases. No stage
imports this package; `triage` itself runs only `indexing` (`triage index build`).
"""
