"""The leaderboard's windows picked for carved words in the corpus's domain mix (`--carved-window-balance`)."""

import pytest


def test_a_share_of_one_trains_on_the_picked_windows_alone(lb):
    corpus, picked = [f"c{i}" for i in range(100)], [f"n{i}" for i in range(40)]
    mixed = lb.mixed_windows(corpus, picked, 1.0, seed=3)
    assert sorted(mixed) == sorted(picked) and mixed == lb.shuffled(picked, 3)


def test_balance_needs_a_share_at_most_one(lb):
    with pytest.raises(SystemExit):
        lb.parse_args(["--carved-window-balance"])
    with pytest.raises(SystemExit):
        lb.parse_args(["--carved-window-share", "1.5"])
    args = lb.parse_args(["--carved-window-share", "1", "--carved-window-balance"])
    assert args.carved_window_balance and args.carved_window_share == 1.0


SMALL_BALANCED_RUN = (
    "--carved-window-share 1 --carved-window-balance --domains en de --heldout-bytes 2000 --corpus-bytes 60000 "
    "--carved-window-pool-bytes 200000 --train-steps 10 --stage1-steps 2"
)


def small_balanced_pick(lb, *options):
    """A 40-window balanced pick on real English and German documents with the real SmolLM2 / Qwen2.5 pair: the
    tokenizers, the picked windows, the held-out text, the corpus and pool pieces, and each domain's wanted count."""
    from tokswap.carved_windows import proportional_counts
    from tokswap.loading import load_tokenizer

    source, target = load_tokenizer(lb.SOURCE_TOKENIZER), lb.load_target_tokenizer("qwen2.5")
    picked = lb.carved_windows(lb.parse_args(SMALL_BALANCED_RUN.split() + list(options)), target, source)
    docs = lb.load_domain_documents()
    heldout, corpus = lb.split_documents(docs, ["en", "de"], 2000, 60000)
    wanted = proportional_counts(lb.domain_window_counts(corpus, target, source), 40)
    _, pool = lb.split_documents(docs, ["en", "de"], 2000, 200000)
    return source, target, picked, heldout, corpus, pool, wanted


def test_balanced_pick_keeps_the_corpus_domain_mix_on_real_text(lb):
    """On real documents and the real SmolLM2 / Qwen2.5 pair: each domain gets its share of the picks, and every pick
    comes from that domain's training pieces, none from a held-out document."""
    source, target, picked, heldout, _, pool, wanted = small_balanced_pick(lb)
    by_domain = {d: set(lb.training_windows([p for dd, _, p in pool if dd == d], target, source)) for d in wanted}
    assert len(picked) == 40
    assert [sum(w in by_domain[d] for w in picked) for d in wanted] == list(wanted.values())
    assert not any(w in text for w in picked for text, _ in heldout.values())


def test_domains_need_the_balanced_pick_and_known_domains(lb):
    with pytest.raises(SystemExit):
        lb.parse_args(["--carved-window-share", "1", "--carved-window-domains", "en"])
    with pytest.raises(SystemExit):
        lb.parse_args(
            "--carved-window-share 1 --carved-window-balance --domains en de --carved-window-domains code".split()
        )
    args = lb.parse_args("--carved-window-share 1 --carved-window-balance --carved-window-domains math en".split())
    assert args.carved_window_domains == ["en", "math"]  # in --domains order: one spelling per recipe
    plain = lb.parse_args("--carved-window-share 1 --carved-window-balance".split())
    name = lb.kept_name(args, "default", 5)
    assert "-balanced-en-math" in name and name.replace("-en-math", "") == lb.kept_name(plain, "default", 5)


def test_picks_only_in_the_named_domains_on_real_text(lb):
    """`--carved-window-domains en`: the English share is picked from the larger pool for its carved words; German
    keeps its share, drawn at random from the corpus's own German windows (what a default run reads there)."""
    from tokswap.carved_windows import carved_word_sets

    source, target, picked, heldout, corpus, pool, wanted = small_balanced_pick(lb, "--carved-window-domains", "en")
    english = lb.training_windows([p for d, _, p in pool if d == "en"], target, source)
    german = lb.training_windows([p for d, _, p in corpus if d == "de"], target, source)
    assert len(picked) == 40
    assert sum(w in set(english) for w in picked) == wanted["en"]
    assert picked[wanted["en"] :] == lb.shuffled(german, 0)[: wanted["de"]]
    # the English picks use more carved words than as many English windows taken in order
    words = carved_word_sets(picked[: wanted["en"]], source, target)
    plain = carved_word_sets(english[: wanted["en"]], source, target)
    assert len(frozenset().union(*words)) > len(frozenset().union(*plain))
    assert not any(w in text for w in picked for text, _ in heldout.values())
