// Package tokenizer implements the SentencePiece unigram tokenizer that T5
// and UMT5 text encoders (Wan 2.1's among them) use, reading either a
// sentencepiece spiece.model or a Hugging Face tokenizer.json.
//
// The goal is id-for-id agreement with the reference implementations:
//
//   - spiece.model is decoded by a small protobuf reader written here and
//     encoded as sentencepiece does: the normalizer applies the model's
//     precompiled_charsmap (the compiled nmt_nfkc rules, a darts-clone double
//     array) with sentencepiece's whitespace handling, and the segmenter is
//     sentencepiece's optimized Viterbi with its float arithmetic and
//     tie-breaking, its USER_DEFINED bonus, unknown-run merging and byte
//     fallback.
//   - EncodeForModel adds what transformers' T5Tokenizer(legacy=True) does on
//     top: special tokens written in the text are split out, ids are
//     truncated to leave room for </s>, </s> is appended, and the result is
//     padded, as WanPipeline's tokenizer call produces. The slow tokenizer
//     appends no second </s> to ids that end with one; T5TokenizerFast,
//     which the Wan repositories name, does (FollowFast).
//   - tokenizer.json follows tokenizers' pipeline (normalizers,
//     Metaspace pre-tokenizer, Unigram in float64 with every vocabulary entry
//     matchable, post-processor template).
//
// Known differences from the references, none of which T5/UMT5 prompts hit:
// the tokenizer.json "Precompiled" normalizer applies longest-match rules
// like sentencepiece rather than tokenizers' grapheme walk; transformers'
// non-legacy T5 mode and added tokens' single_word/normalized flags are not
// modelled; when a model has no precompiled_charsmap, rule sets named like
// sentencepiece's (nfkc, nmt_nfkc, *_cf, nfc, ...) fall back to
// golang.org/x/text, where sentencepiece itself would not normalize.
//
// Text cleaning a pipeline does before tokenizing (diffusers' WanPipeline
// runs prompt_clean: ftfy, HTML unescaping, whitespace collapsing) is not
// part of this package: see ferry/pytext and pipeline/wan's CleanPrompt.
//
// WriteSentencePiece and NewModel let a synthetic checkpoint carry a valid
// tokenizer.
package tokenizer
