"""Every zoo model against its published parameter count and, where one exists, FLOPs."""

from __future__ import annotations

import pytest

from workloads import RegistryError, build_model, list_models

# Sources: torchvision model docs (alexnet, vgg16, resnet50, inception_v3 incl. AuxLogits);
# Hugging Face configs of bert-base-uncased and gpt2; LeCun et al. 1998; Hinton and
# Salakhutdinov 2006 (784-1000-500-250-30 and mirror, biases, untied).
PUBLISHED_PARAMS = {
    "alexnet": 61_100_840, "vgg16": 138_357_544, "resnet50": 25_557_032,
    "inception_v3": 27_161_264, "bert_base": 109_482_240, "gpt2_small": 124_439_808,
    "lenet5": 61_706, "stacked_autoencoder": 2_837_314,
}
# torchvision model docs, GFLOPS column (multiply-adds) at the standard input size.
PUBLISHED_GMACS = {"alexnet": 0.71, "vgg16": 15.47, "resnet50": 4.09, "inception_v3": 5.71}


def test_zoo_has_every_promised_model() -> None:
    assert set(list_models()) == {"lenet5", "alexnet", "vgg16", "resnet50", "inception_v3",
                                  "stacked_autoencoder", "lstm", "bert_base", "gpt2_small",
                                  "mlp", "bert_large", "gpt2_large", "gpt3_xl",
                                  "gpt3_xl_neusight", "gpt3_2.7b", "opt_1.3b"}


@pytest.mark.parametrize(("name", "params"), sorted(PUBLISHED_PARAMS.items()))
def test_parameter_count_is_the_published_one(name: str, params: int) -> None:
    assert build_model(name).params == params


@pytest.mark.parametrize(("name", "gmacs"), sorted(PUBLISHED_GMACS.items()))
def test_forward_flops_within_two_percent_of_published(name: str, gmacs: float) -> None:
    assert build_model(name).flops / 2 == pytest.approx(gmacs * 1e9, rel=0.02)


@pytest.mark.parametrize("name", ["alexnet", "resnet50", "bert_base", "lstm"])
def test_flops_scale_linearly_with_batch(name: str) -> None:
    assert build_model(name, batch=3).flops == 3 * build_model(name, batch=1).flops


def test_lstm_parameters_follow_the_nn_lstm_formula() -> None:
    # PyTorch nn.LSTM: 4 * (in * h + h * h + 2h) per layer; plus embedding and decoder.
    layers, h, vocab = 2, 650, 10000
    expected = vocab * h + layers * 4 * (h * h + h * h + 2 * h) + (h * vocab + vocab)
    assert build_model("lstm").params == expected
    short = build_model("lstm", seq_len=5)
    assert short.params == expected  # weights are shared across steps, not per step
    assert len(build_model("lstm", seq_len=10)) > len(short)


def test_transformer_matmul_flops_closed_form() -> None:
    # Dense layers: 2 * tokens * (weights in every linear), the pooler on one token only;
    # attention: 2 * 2 * S^2 * D per layer and sequence (scores and context), as in
    # Kaplan et al. 2020, Table 1.
    s, d, layers = 128, 768, 12
    g = build_model("bert_base", seq_len=s)
    dense = sum(op.flops for op in g if op.kind == "linear")
    per_layer = 4 * d * d + 8 * d * d
    biases = layers * s * (4 * d + 4 * d + d) + d
    assert dense == 2 * s * layers * per_layer + 2 * d * d + biases
    attention = sum(op.flops for op in g if op.kind == "matmul")
    assert attention == layers * 2 * 2 * s * s * d


def test_seq_len_is_refused_for_image_models() -> None:
    with pytest.raises(RegistryError, match="model 'resnet50': takes no seq_len, got 8"):
        build_model("resnet50", seq_len=8)
