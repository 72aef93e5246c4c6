"""transformers' `ModelTesterMixin` and `ConfigTester` on the AGF translator (run by `run.py`, not by default)."""

import unittest

import torch
from hf_common_tests.generation.test_utils import GenerationTesterMixin
from hf_common_tests.test_configuration_common import ConfigTester
from hf_common_tests.test_modeling_common import ModelTesterMixin, ids_tensor
from transformers.models.auto import modeling_auto

from plldr_hf import AgfConfig, AgfForConditionalGeneration, AgfModel


# the mixin decides which inputs and labels a class gets from transformers' own name mappings, which know only
# in-tree models: list ours there (in this test process only), so they are tested like Llama / Marian
modeling_auto.MODEL_MAPPING_NAMES["agf"] = "AgfModel"
modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES["agf"] = "AgfForConditionalGeneration"


class AgfModelTester:
    def __init__(self, parent, batch_size=4, seq_length=7, is_training=True):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.encoder_seq_length = seq_length
        self.is_training = is_training
        self.vocab_size = 99
        self.hidden_size = 32
        self.num_hidden_layers = 2
        self.num_attention_heads = 4

    def get_config(self):
        return AgfConfig(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads,
            encoder_ffn_dim=37,
            decoder_ffn_dim=37,
            max_position_embeddings=64,
            position_encoding="agf",
            pcmv=True,
            dropout=0.0,
        )

    def prepare_config_and_inputs_for_common(self):
        # no padding inside the sources (pad id 0 is excluded), as Marian's tester does. Decoder masks stay all ones:
        # with holes in them, the generation mixin's continue-from-cache test pads a mask that is one place off its
        # ids and differs for Marian as for AGF (tests/models/agf/test_modeling_agf.py,
        # test_the_mixins_continuation_shifts_the_decoder_mask_for_marian_too)
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        inputs = {
            "input_ids": input_ids,
            "attention_mask": torch.ones_like(input_ids),
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": torch.ones_like(decoder_input_ids),
        }
        return self.get_config(), inputs


class AgfCommonTest(ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (AgfModel, AgfForConditionalGeneration)
    is_encoder_decoder = True

    def setUp(self):
        self.model_tester = AgfModelTester(self)
        self.config_tester = ConfigTester(
            self,
            config_class=AgfConfig,
            d_model=32,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_layers=2,
            decoder_layers=2,
        )

    def test_config(self):
        self.config_tester.run_common_tests()


torch.set_num_threads(1)
