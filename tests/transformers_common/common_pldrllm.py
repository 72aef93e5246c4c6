"""transformers' `ModelTesterMixin` and `ConfigTester` on PLDR-LLM (run by `run.py`, not by the default suite)."""

import unittest

import torch
from hf_common_tests.generation.test_utils import GenerationTesterMixin
from hf_common_tests.test_configuration_common import ConfigTester
from hf_common_tests.test_modeling_common import ModelTesterMixin, ids_tensor, random_attention_mask
from transformers.models.auto import modeling_auto

from plldr_hf import (
    PldrllmConfig,
    PldrllmForCausalLM,
    PldrllmForQuestionAnswering,
    PldrllmForSequenceClassification,
    PldrllmForTokenClassification,
    PldrllmModel,
)


# the mixin decides which inputs and labels a class gets from transformers' own name mappings, which know only
# in-tree models: list ours there (in this test process only), so they are tested like Llama / Marian
modeling_auto.MODEL_MAPPING_NAMES["pldrllm"] = "PldrllmModel"
modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES["pldrllm"] = "PldrllmForCausalLM"
modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES["pldrllm"] = "PldrllmForSequenceClassification"
modeling_auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES["pldrllm"] = "PldrllmForTokenClassification"
modeling_auto.MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES["pldrllm"] = "PldrllmForQuestionAnswering"


class PldrllmModelTester:
    def __init__(self, parent, batch_size=4, seq_length=7, is_training=True):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.vocab_size = 99
        self.hidden_size = 32
        self.num_hidden_layers = 2
        self.num_attention_heads = 2
        self.num_labels = 3

    def get_config(self):
        return PldrllmConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            head_dim=self.hidden_size // self.num_attention_heads,
            intermediate_size=37,
            num_hidden_layers=self.num_hidden_layers,
            A_dff=8,
            num_reslayerA=2,
            num_denseA=2,
            max_position_embeddings=64,
            num_labels=self.num_labels,
        )

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        attention_mask = random_attention_mask([self.batch_size, self.seq_length])
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


class PldrllmCommonTest(ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (
        PldrllmModel,
        PldrllmForCausalLM,
        PldrllmForSequenceClassification,
        PldrllmForTokenClassification,
        PldrllmForQuestionAnswering,
    )

    def setUp(self):
        self.model_tester = PldrllmModelTester(self)
        self.config_tester = ConfigTester(
            self, config_class=PldrllmConfig, hidden_size=32, num_attention_heads=2, head_dim=16
        )

    def test_config(self):
        self.config_tester.run_common_tests()


torch.set_num_threads(1)
