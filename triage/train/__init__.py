"""What is built from data, above the stages: the neighbour index (`indexing`, from the reference
cases read by the stages: `references`) and the static embedding (`distil`). The calibration
and the learned model are fitted by `bench/eval_corpus.py --write-calibration` on the same
reference cases. Each reads the pipeline's stages; no stage imports this package.
"""
