"""The TokAlign pipeline: two tokenizers and a corpus -> a verified `TokenAlignment`.

One module per step: `cooccurrence` (counting), `glove` (vectors), `vocab` (tokens as bytes), `matching`
(cross-space matches), `quality` (BLEU-1 and similarity), `pipeline` (`align_tokenizers`, the steps in order);
`byte_offsets` finds the byte boundaries two tokenizations share (self-distillation).
"""
