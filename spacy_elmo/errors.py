"""Every user-facing message of spacy-elmo, in one place.

Each message names the problem and the fix. Format them with ``str.format``
keyword arguments. Add new messages to the class of your layer; keep the
names descriptive (``E_<WHAT>``) so grepping finds the raise site. A path inside
a suggested command (``{shell_path}``, ``{shell_model}``, ...) is given shell-quoted
(``paths.shell_quoted``) so that the command pastes as it is; prose names it plain.

Stdlib only, no imports: build_flags.py (run by setup.py before the package is
importable) reads the build's messages from this file by path.
"""


# What a check of the input's values says when it runs inside a graph that torch.compile or
# torch.export traced (torch._assert_async): the graph cannot name the offending value.
_IN_GRAPH = (
    " (Checked inside a compiled or exported graph, which cannot say where: bilm.check_ids(ids), or "
    "the model called eagerly, on the same input names the exact place.)"
)


# How to build spacy_elmo._C again against the installed torch, from a checkout or for an installed copy: the
# fix of W_FIX_BUILD and of the messages that ask for a rebuild, with a switch set (SPACY_ELMO_CUDA=1,
# TORCH_CUDA_ARCH_LIST) or not. --no-cache-dir: pip otherwise reuses the wheel it cached when it first built an
# sdist from an index (its cache key is the sdist's URL and the interpreter, not the switches nor torch's
# version), and the "rebuild" reinstalls the very build it should replace.
def _rebuild(env: str = "") -> str:
    """The two rebuild commands, each in backticks; ``env``: the variables the build needs set
    (``"SPACY_ELMO_CUDA=1"``), put at the start of each command, inside its backticks, so that it pastes with
    them (said in the prose only, the pasted command built without them)."""
    run = env + " " if env else ""
    return (
        f"in a source checkout `{run}pip install --no-cache-dir --no-build-isolation -e .`; for an installed copy "
        f"`{run}pip install --no-cache-dir --no-build-isolation --no-deps --force-reinstall SOURCE`, SOURCE the "
        "spacy-elmo sdist or checkout"
    )


def counted(n: int, singular: str, plural: str = "") -> str:
    """``n`` and its noun in agreement, for a message or a summary line: ``1 step``, ``2 steps``, ``1,024 tokens``,
    ``3 directories`` (``plural``: where an "s" does not make it; default ``singular + "s"``). Here, beside the
    messages, so that every layer (the kernels' checks to the CLI) can word its counts alike."""
    return f"{n:,} {singular if n == 1 else plural or singular + 's'}"


def listed(names: "list[str]", shown: int, total: "int | None" = None) -> str:
    """The first ``shown`` of ``names`` for a message, the rest counted: ``a, b and 3 more``. ``total``: how many
    there are where ``names`` keeps only the first few (default ``len(names)``)."""
    more = (len(names) if total is None else total) - min(shown, len(names))
    return ", ".join(names[:shown]) + (f" and {more:,} more" if more > 0 else "")


#: Letters whose names begin with a vowel sound ("an F", "an L", "an N"): a name spelled out, as an initialism is
_VOWEL_LETTERS = frozenset("aefhilmnorsx")
#: Names that begin with a written vowel but a consonant's sound ("a uint8", "a UserDict", "a ufunc")
_CONSONANT_SOUNDS = ("uni", "uu", "uint", "use", "usu", "uti", "ufunc", "eu", "one")


def with_article(name: str) -> str:
    """``name`` (a type's name for a message, or a phrase that begins with one) after its article, as it is said:
    ``an int``, ``an object``, ``a float``, ``a NoneType``, ``a uint8``, ``an ndarray``, ``an LSTM``. A name that
    begins as an initialism (two capitals, a letter and a digit, NumPy's ``nd``) is said letter by letter. Every
    message that names a type after "a" takes it from here, so that none says "a int". Leading underscores are
    not said (``an _ElmoBiLm``: "_E" is no initialism)."""
    said = name.lstrip("_") or name
    spelled = said[1:2].isdigit() or said[:2].isupper() or said.startswith("nd")
    if spelled:
        vowel = said[:1].lower() in _VOWEL_LETTERS
    else:
        vowel = said[:1].lower() in frozenset("aeiou") and not said.lower().startswith(_CONSONANT_SOUNDS)
    return ("an " if vowel else "a ") + name


class Errors:
    # --- characters (spacy_elmo.chars) -------------------------------------
    E_SENTENCES_NOT_LISTS = (
        "Expected a list of sentences, each a list of token strings, but sentence {index} is {a_type}. "
        "Tokenize first, e.g. [['Hello', 'world']] rather than ['Hello world']."
    )
    E_BATCH_NOT_LIST = (
        "Expected a list of sentences, each a list of token strings, but got an object of type {type_name}. "
        "E.g. [['Hello', 'world'], ['Bye']]; for one text: [text.split()]."
    )
    #: E_BATCH_NOT_LIST for a mapping (a dict): iterated, its keys would be the sentences (a str key is refused
    #: as untokenized), which it may hold as its values
    E_BATCH_IS_MAPPING = (
        "Expected a list of sentences, each a list of token strings, but got a mapping (type {type_name}), whose "
        "keys would be taken for the sentences. Pass the sentences as a list in order: list(d.values()) where they "
        "are its values, list(d.keys()) where they are its keys."
    )
    E_BATCH_UNORDERED = (
        "Expected a list of sentences in order, but got an unordered set (type {type_name}): its sentences would "
        "become rows in an arbitrary order. Pass the sentences as a list (or tuple), in the order you want their "
        "rows."
    )
    E_SENTENCE_NOT_LIST = (
        "Expected a list of sentences, each a list of token strings in order, but sentence {index} is "
        "{a_type}. Pass each sentence as a list (or tuple) of token strings, e.g. list(tokens)."
    )
    #: E_SENTENCE_NOT_LIST for a sentence with a ``.text`` that iterates (a spaCy Doc or Span): list() of it gives
    #: tokens, not strings, so not "e.g. list(tokens)". doc.sents raises (spaCy's E030) on a doc without sentence
    #: boundaries (spacy.blank): the texts of the whole doc come first
    E_SENTENCE_HAS_TEXT = (
        "Expected a list of sentences, each a list of token strings, but sentence {index} is an object of type "
        "{type_name} with .text (like a spaCy Doc or Span). Pass its tokens' texts, e.g. [[t.text for t in doc]] "
        "(the doc as one sentence), or [[t.text for t in s] for s in doc.sents] where sentence boundaries are set."
    )
    #: E_SENTENCE_NOT_LIST for a sentence with a ``.text`` that does not iterate (a spaCy Token): the batch given
    #: is one document or sentence, a sequence of tokens, not a list of sentences
    E_SENTENCE_IS_TOKEN = (
        "Expected a list of sentences, each a list of token strings, but sentence {index} is an object of type "
        "{type_name} with .text (like a spaCy Token): the batch given is one document or sentence, not a list of "
        "sentences. Pass a list of sentences of token texts, e.g. [[t.text for t in doc]] (the doc as one "
        "sentence), or [[t.text for t in s] for s in doc.sents] where sentence boundaries are set."
    )
    E_TOKEN_NOT_STR = (
        "Token {token_index} of sentence {sentence_index} is {a_type}, not a str. "
        "Pass token texts (e.g. [t.text for t in doc]); a batch is a list of sentences, each a list of strings."
    )
    #: E_TOKEN_NOT_STR for a token with a ``.text`` that does not iterate (a spaCy Token)
    E_TOKEN_HAS_TEXT = (
        "Token {token_index} of sentence {sentence_index} is an object of type {type_name} with .text (like a spaCy "
        "Token), not a str: pass its text (token.text), e.g. [t.text for t in span] for a sentence."
    )
    #: E_TOKEN_NOT_STR for a token with a ``.text`` that iterates (a spaCy Doc or Span, one level too deep: [[doc]]):
    #: its tokens' texts are the sentence, not its .text (untokenized)
    E_TOKEN_HAS_TEXTS = (
        "Token {token_index} of sentence {sentence_index} is an iterable object of type {type_name} with .text "
        "(like a spaCy Doc or Span), not a str: a sentence is a list of token texts. Pass its tokens' texts as the "
        "sentence, e.g. [[t.text for t in doc]] rather than [[doc]], or [[t.text for t in d] for d in docs]."
    )
    E_MAX_CHARS_TOO_SMALL = (
        "max_characters_per_token must be a whole number of at least 3 (room for the begin/end-of-word "
        "markers and one byte; the released models use 50); found {value!r}."
    )

    # --- configuration (spacy_elmo.bilm.config) -----------------------------
    E_UNKNOWN_PRESET = "Unknown preset {name!r}. Choose one of: {choices}."
    E_BAD_ACTIVATION = "Unsupported char-CNN activation {value!r}: use 'relu' or 'tanh'."
    E_BAD_FILTERS = (
        "char_cnn.filters must be a non-empty list of [width, count] pairs of positive "
        "integers; found {value!r}."
    )
    E_FILTER_TOO_WIDE = (
        "Filter width {width} is wider than max_characters_per_token={max_chars}; "
        "use narrower filters or a larger max_characters_per_token."
    )
    E_BAD_N_CHARACTERS = (
        "n_characters must be 261 or 262, a whole number (byte-level ELMo needs 261 character ids, 262 with the +1 "
        "padding offset used at inference); found {found}."
    )
    #: E_BAD_N_CHARACTERS's ``found`` for a value that is no whole number: its type named (``'262' (a string)``),
    #: ``what`` "a number" (a string, null, a list) or "a whole number" (a real number: 262.0, 261.5)
    E_BAD_N_CHARACTERS_TYPE = "{value} ({kind}), not {what}"
    E_MODEL_TOO_LARGE = (
        "These sizes make a biLM of {n_params} parameters, {size} of tensors (float32 weights and int64 "
        "<S>/</S> char ids), past the {most} that torch can address; {named}. Use the sizes "
        "of a model that can be built: the original preset (projection_dim 512, cell_dim 4096, n_layers 2) has 93.6M parameters, 357 MiB."
    )
    #: E_MODEL_TOO_LARGE's {named}: sizes each too large with every other size at most its default (must shrink)
    E_MODEL_TOO_LARGE_ALONE = "too large even with every other size at most its default: {sizes}"
    #: E_MODEL_TOO_LARGE's {named}: no size too large alone; those of the part of the model holding the most bytes
    #: (those whose values make that part larger than their defaults do: each may shrink)
    E_MODEL_TOO_LARGE_TOGETHER = "no size is too large alone; the most bytes are of {sizes} together"
    #: E_MODEL_TOO_LARGE's {named}: no size too large alone; the one size of the part holding the most bytes
    E_MODEL_TOO_LARGE_WITH_OTHERS = (
        "no size is too large whatever the other sizes; {sizes} holds the most bytes, too large with the other "
        "sizes given"
    )
    E_BAD_POSITIVE = "{name} must be a positive integer; found {value!r}."
    E_BAD_NON_NEGATIVE = "{name} must be an integer of 0 or more; found {value!r}."
    E_BAD_CLIP = "{name} must be a finite positive number, or null for no clipping; found {value}."
    E_OPTIONS_MISSING_KEY = (
        "The ELMo options in {source} lack {name!r} {place}. An AllenNLP/bilm-tf options.json "
        "has 'lstm' (dim, projection_dim, n_layers, ...) and 'char_cnn' (embedding.dim, "
        "filters, ...): check that you passed the options.json of an ELMo model (another tool's JSON, e.g. a "
        "Hugging Face config.json, has other keys), or add {name!r} {place}."
    )
    #: E_OPTIONS_MISSING_KEY's ``place``: where the key ``name`` goes in the file (a dotted path, 'lstm.dim', is no
    #: key a file holds)
    E_OPTIONS_KEY_AT_TOP = "at the top level"
    E_OPTIONS_KEY_IN_SECTION = "in the {section!r} section"
    E_OPTIONS_KEY_IN_NESTED = "in the {inner!r} object of the {section!r} section"
    E_OPTIONS_IS_NATIVE_CONFIG = (
        "The ELMo options in {source} are a spacy-elmo model's config.json (\"format\": \"{format}\"), not an "
        "AllenNLP/bilm-tf options.json. A spacy-elmo model is loaded by its directory (config.json + "
        "model.safetensors) with weight_file=None: Elmo(directory, None, ...), ElmoEmbedder(directory), or "
        "BiLM.load(directory)."
    )
    E_OPTIONS_NO_SKIP_KEY = (
        "The ELMo options in {source} lack 'use_skip_connections' in the 'lstm' section, and no default is safe: AllenNLP "
        "refuses such options and bilm-tf's inference model fails on them. Add it there: "
        "\"use_skip_connections\": true for a released model (all of them use skip connections), or false for "
        "a model that bilm-tf trained without them."
    )
    E_OPTIONS_NO_ACTIVATION = (
        "The ELMo options in {source} lack 'activation' in the 'char_cnn' section, and no default is safe: AllenNLP and "
        "bilm-tf refuse such options, and taking it as relu would silently compute another model for one trained "
        "with tanh. Add it there: \"activation\": \"relu\" for a released model (all of them "
        "use relu), or \"tanh\" for a model trained with it."
    )
    E_OPTIONS_NO_N_LAYERS = (
        "The ELMo options in {source} lack 'n_layers' in the 'lstm' section, the biLSTM's layers per direction (not taken "
        "as 1, bilm-tf's default, which would be a guess). {fix}"
    )
    E_OPTIONS_N_LAYERS_IN_FILE = (
        "The weight file {path} holds {n} layer(s) per direction: add \"n_layers\": {n} to the 'lstm' section."
    )
    E_OPTIONS_N_LAYERS_UNKNOWN = (
        "Add \"n_layers\": N to the 'lstm' section, N the layers of the model that the weights hold (the released "
        "models have 2), or, for a model to pretrain, the layers it should have."
    )
    E_OPTIONS_BAD_VALUE = (
        "The ELMo options in {source} have an invalid {key} (BiLMConfig.{field}): {error} Fix {key} "
        "there{original}."
    )
    #: E_OPTIONS_BAD_VALUE where the sizes of several keys make too large a model together: any may shrink
    E_OPTIONS_BAD_VALUES = (
        "The ELMo options in {source} have sizes too large together, {keys}: {error} One alone may not be "
        "enough: shrink them there{original}."
    )
    #: E_OPTIONS_BAD_VALUE where the sizes of several keys each make too large a model alone: each must shrink
    E_OPTIONS_BAD_VALUES_EACH = (
        "The ELMo options in {source} have sizes each too large alone, {keys}: {error} Fix each of them "
        "there{original}."
    )
    #: E_OPTIONS_BAD_VALUE's (and E_OPTIONS_NOT_OBJECT's) ``original`` where the options were read with a weight file
    E_OPTIONS_BAD_VALUE_ORIGINAL = ", or use the options.json that came with the weight file {weight_file}"
    E_OPTIONS_NOT_JSON = (
        "Could not read ELMo options from {path}: {error}. Pass the options.json that came "
        "with the weight file."
    )
    E_OPTIONS_IS_HDF5 = (
        "{path} is an HDF5 file (ELMo weights), not an options.json: the options file and the weight file look "
        "swapped. Pass the options.json first and the .hdf5 second, e.g. Elmo(options_file, weight_file, ...) or "
        "BiLM.from_allennlp(options_file, weight_file)."
    )
    E_OPTIONS_NOT_OBJECT = (
        "In the ELMo options in {source}, {what} must be a JSON object ({shape}); found {found}. Fix {what} "
        "there{original}."
    )
    E_OPTIONS_UNREADABLE = (
        "Could not read the ELMo options file {path}: {error}. The file is there but could not be read: check "
        "what the error says (e.g. give this account read permission, chmod) and try again."
    )
    E_OPTIONS_FILE_MISSING = (
        "The ELMo options file {path} does not exist. Check the path: pass the options.json that came with the "
        "weight file."
    )
    E_OPTIONS_IS_DIR = (
        "{path} is a directory, but the ELMo options are the options.json file inside it: pass that file, or "
        "load the whole directory with BiLM.load(directory) (one options.json + one .hdf5, or a directory "
        "written by BiLM.save)."
    )
    E_BAD_BOOL = "{name} must be true or false (a JSON boolean, not a string or number); found {value!r}."
    E_CONFIG_UNKNOWN_FIELD = (
        "Unknown BiLMConfig field(s) {names}; the fields are {choices}. Remove or rename them (AllenNLP "
        "options.json files are read with BiLMConfig.from_allennlp_options, not from_dict)."
    )

    # --- weight files (spacy_elmo.bilm.allennlp_io / native_io) -------------
    E_WEIGHT_FILE_MISSING = "The weight file {path} does not exist. Check the path."
    E_WEIGHT_FILE_NOT_HDF5 = (
        "{path} could not be opened as an hdf5 file ({error}): it is damaged (e.g. a truncated "
        "download) or not hdf5. AllenNLP/bilm-tf ELMo weights are .hdf5 files; this project's own "
        "models are directories written by BiLM.save()."
    )
    E_WEIGHT_FILE_IS_NATIVE = (
        "{path} is {what}, not an AllenNLP/bilm-tf weight file (.hdf5). A spacy-elmo model is loaded by its "
        "directory (config.json + model.safetensors) with weight_file=None: Elmo(directory, None, ...), "
        "ElmoEmbedder(directory), or BiLM.load(directory). With AllenNLP options, pass the .hdf5 that came with them."
    )
    #: E_WEIGHT_FILE_IS_NATIVE's ``what``: a file of a spacy-elmo model directory
    E_WEIGHT_FILE_WHAT_NATIVE = "a file of the spacy-elmo model {directory}"
    #: E_WEIGHT_FILE_IS_NATIVE's ``what``: a .safetensors file elsewhere
    E_WEIGHT_FILE_WHAT_SAFETENSORS = "a safetensors file"
    E_DATASET_MISSING = (
        "The weight file {path} has no dataset {dataset!r} (expected shape {expected}). "
        "The file does not match the options: check that options and weights come from "
        "the same model (e.g. n_highway, n_layers, filters)."
    )
    E_NOT_ELMO_WEIGHTS = (
        "{path} is not an ELMo weight file: it has none of the datasets of one (char_embed, CNN/..., RNN_0/...), "
        "but {datasets}. Pass the .hdf5 weights that came with the options.json (an embeddings file written by "
        "`spacy-elmo embed` or `allennlp elmo` holds vectors, not weights)."
    )
    E_CHAR_EMBED_PADDING_ROW = (
        "Dataset 'char_embed' in {path} has {rows} rows, the first all zeros: it is AllenNLP's in-memory table, "
        "with the padding row 0 it adds kept. The weight file stores the {expected} rows without it (AllenNLP and "
        "bilm-tf would read this one shifted by a row: other vectors). Drop row 0, e.g. with h5py: "
        "t = f['char_embed'][1:]; del f['char_embed']; f['char_embed'] = t."
    )
    E_CHAR_EMBED_ROWS = (
        "Dataset 'char_embed' in {path} has {rows} rows where a weight file has {expected}: AllenNLP's in-memory "
        "table has {rows} (a padding row 0 of zeros added), but this row 0 is not zeros, so which rows are the "
        "weights is unknown. Use the .hdf5 that came with the options.json, or write the file again from the "
        "model (BiLM.to_allennlp)."
    )
    E_DATASET_SHAPE = (
        "Dataset {dataset!r} in {path} has shape {found}, but the options imply {expected}. "
        "The options file does not belong to this weight file (compare lstm.dim, "
        "lstm.projection_dim, char_cnn.filters and char_cnn.embedding.dim)."
    )
    #: ``fix``: what the caller that was given the directory can do (E_NATIVE_DIR_FIX_*)
    E_NATIVE_DIR_MISSING = "{path} is not a spacy-elmo model directory (no {filename}). {fix}"
    #: E_NATIVE_DIR_MISSING's ``fix`` for BiLM.load and the rest
    E_NATIVE_DIR_FIX_LOAD = (
        "Write one with BiLM.save(directory), or load AllenNLP weights with BiLM.from_allennlp(options, weights)."
    )
    #: E_NATIVE_DIR_MISSING's ``fix`` for a command's argument (MODEL_DIR, --model, --init), followed by
    #: E_NATIVE_DIR_HOLDS or E_NATIVE_DIR_EMPTY (what the directory given holds) where it can be listed
    E_NATIVE_DIR_FIX_CLI = (
        "Pass a model directory: one that spacy-elmo pretrain or spacy-elmo export --format native wrote "
        "(config.json + model.safetensors), or one holding AllenNLP's options.json and .hdf5."
    )
    E_NATIVE_DIR_HOLDS = "{path} holds {names}."
    E_NATIVE_DIR_EMPTY = "{path} is empty."
    # {given} of the messages below: what a directory given where biLM weights are read is (SavedPipelineGiven.given)
    E_GIVEN_PIPELINE = "{path} is a saved spaCy pipeline"
    E_GIVEN_PIPELINE_COMPONENT = "{path} is the directory of the {component!r} component of the saved spaCy pipeline {pipeline}"
    E_MODEL_IS_PIPELINE = (
        "{given}, not biLM weights: BiLM.load and the spacy-elmo "
        "commands read a directory written by BiLM.save, `spacy-elmo pretrain` or `spacy-elmo export`, or one "
        "holding an AllenNLP options.json + .hdf5. Export the biLM of the pipeline's elmo component (with the "
        "weights it was trained or fine-tuned with there) as one first: `spacy-elmo export {shell_pipeline} ELMO_DIR "
        "--format native`, then give ELMO_DIR; or run the pipeline itself: spacy.load({py_pipeline}) gives each "
        "doc its ELMo layers in doc._.elmo."
    )
    E_NATIVE_TENSOR_MISSING = (
        "The model file {path} lacks the tensor {name!r} (expected shape {expected}); "
        "the file is incomplete or belongs to another configuration."
    )
    E_NATIVE_TENSOR_SHAPE = (
        "Tensor {name!r} in {path} has shape {found}, but config.json implies {expected}. "
        "The config and weights do not belong together."
    )
    E_INITIAL_STATE_SHAPE = (
        "The initial state must be h {expected_h} and c {expected_c} (direction, layer, width) for this "
        "biLM; found h {found_h} and c {found_c}. Fit it on this model with BiLM.fit_initial_state."
    )
    E_INITIAL_STATE_FILE_SHAPE = (
        "{path} holds an initial state h {found_h} and c {found_c}, but the model's config.json implies h "
        "{expected_h} and c {expected_c} (direction, layer, width): the file belongs to another model. Delete it "
        "(sentences then start from zeros) or fit it again on this model: spacy-elmo fit-state {directory} TEXT_PATH."
    )
    E_INITIAL_STATE_FILE_DTYPE = (
        "{path}: {name!r} holds {dtype} values, but an initial state is floating point (BiLM.save writes "
        "float32): the file is damaged or was not written by spacy-elmo. Delete it (sentences then start from "
        "zeros) or fit it again on this model: spacy-elmo fit-state {directory} TEXT_PATH."
    )
    E_CARRIED_STATE_SHAPE = (
        "Carried states must be h (2, {layers}, B, {proj}) and c (2, {layers}, B, {cell}) (direction, layer, "
        "row, width) with the same B; found h {found_h} and c {found_c}. Restore a value read from "
        "BiLM.carried_states of this model, or None."
    )
    E_FIT_STATE_ARGS = (
        "fit_initial_state needs whole numbers rows >= 1 and warmup >= 0; found rows={rows!r}, warmup={warmup!r}."
    )
    E_FIT_STATE_TOO_FEW = (
        "Fitting the initial state needs at least {needed} non-empty sentences ({rows} streams of more than "
        "{warmup} warm-up sentences each); found {n}. Give it more running text or fewer rows."
    )
    E_NATIVE_BAD_FORMAT = (
        "{path} was not written by spacy-elmo: {found}, where spacy-elmo's has \"format\": \"{expected}\". The "
        "directory looks like another tool's model (a Hugging Face transformers config.json, say). Pass a "
        "directory written by `spacy-elmo pretrain`, `spacy-elmo export` or BiLM.save, or one holding an AllenNLP "
        "options.json + .hdf5 weights (or load those files with BiLM.from_allennlp(options, weights))."
    )
    E_NATIVE_FORMAT_ABSENT = "it has no \"format\" key"
    E_NATIVE_FORMAT_OTHER = "its \"format\" is {found}"
    E_TF_CHECKPOINT_DIR = (
        "{path} holds a TensorFlow checkpoint ({files}: bilm-tf's training output), which spacy-elmo does not "
        "read. Dump its weights to hdf5 with bilm-tf's dump_weights "
        "(`python bin/dump_weights.py --save_dir {shell_path} --outfile weights.hdf5`), then pass a directory "
        "holding that weights.hdf5 and the run's options.json, or load the two files with "
        "BiLM.from_allennlp(options, weights)."
    )
    E_NO_DEFAULT_MODEL = (
        "The bundled default model is not installed (looked in {path}). Pass a model "
        "directory or AllenNLP weights explicitly, or reinstall spacy-elmo with its data."
    )
    E_ALLENNLP_DIR = (
        "{path} holds {n_hdf5} .hdf5 file(s) and {n_options} options.json: {found}{dirs}. A directory of AllenNLP "
        "weights must hold exactly one of each."
    )
    #: E_ALLENNLP_DIR's and E_OPTIONS_DIR's ``dirs``: the directories named like the files counted (options.json/,
    #: weights.hdf5/), not counted: "0 found" alone did not say why the options.json seen was not one
    E_NAMED_LIKE_FILE_DIR = "; {names} is a directory, not a file"
    E_NAMED_LIKE_FILE_DIRS = "; {names} are directories, not files"
    E_NATIVE_CONFIG_NOT_JSON = (
        "{path} is not valid JSON ({error}): the model's config.json is damaged. Restore it from the "
        "original model directory, or write the model again with BiLM.save()."
    )
    E_NATIVE_CONFIG_NOT_OBJECT = (
        "{path} must hold a JSON object ({{\"format\": ..., \"config\": {{...}}}}, as BiLM.save() writes it); "
        "found {found}. Restore config.json from the original model directory."
    )
    E_NATIVE_CONFIG_NO_CONFIG = (
        "{path} has no \"config\" object with the BiLMConfig fields (projection_dim, cell_dim, ...); found "
        "{found!r}. Restore config.json from the original model directory."
    )
    E_NATIVE_BAD_CONFIG = "The model configuration in {path} is invalid: {error}"
    E_NATIVE_VERSION = (
        "{path} has format version {found!r}, but this spacy-elmo reads versions 1 to {supported}. A higher "
        "version was written by a newer spacy-elmo: upgrade spacy-elmo (pip install -U spacy-elmo). Any other "
        "value means config.json is damaged: restore it from the original model directory."
    )
    E_DATASET_UNEXPECTED = (
        "The weight file {path} has dataset(s) that the options do not describe: {datasets}. The options do not "
        "match the weights (they imply fewer LSTM layers, highway layers or filters than the file holds): use the "
        "options.json that came with this weight file (compare lstm.n_layers, char_cnn.n_highway, char_cnn.filters)."
    )
    E_NATIVE_TENSOR_UNEXPECTED = (
        "The model file {path} has tensor(s) that config.json does not describe: {names}. config.json does not "
        "match the weights (it implies fewer LSTM layers, highway layers or filters than the file holds): restore "
        "the config.json that was saved with these weights (compare n_layers, n_highway, filters)."
    )
    E_PROJECTION_NOT_IDENTITY = (
        "The weight file {path} has a CNN_proj that is not the identity, but its options say the char-CNN width "
        "equals the projection width ({n}): bilm-tf ignores CNN_proj then and AllenNLP applies it, so the file means "
        "two different models. Use the options.json that came with this weight file."
    )
    E_DATASET_DTYPE = (
        "Dataset {name!r} in {path} holds {dtype} values, but weights are float arrays (float32 in the "
        "released files). The file is damaged or not an ELMo weight file: use the .hdf5 that came with the options."
    )
    E_SAVE_DTYPE = (
        "BiLM.save(dtype=...) takes a floating torch dtype to store the weights in (torch.float16, "
        "torch.bfloat16, torch.float32) or None to keep the model's; got {dtype!r}."
    )
    E_WEIGHT_FILE_DAMAGED = (
        "{path} opens as hdf5 but its contents could not be read ({error}): the file is damaged (e.g. a "
        "truncated or corrupted download). Download or copy the .hdf5 again from its source."
    )
    E_WEIGHT_FILE_IS_DIR = (
        "{path} is a directory, but the weight file is the .hdf5 file inside it: pass that file, or load the "
        "whole directory with BiLM.load(directory) (one options.json + one .hdf5)."
    )
    E_WEIGHTS_NOT_FINITE = (
        "{path}: {name!r} holds {count} NaN or infinite value(s). Such a model gives NaN vectors. The file is "
        "damaged (copy it again from its source), or the model was written after its training diverged (use an "
        "earlier checkpoint, or pretrain again with a lower learning rate)."
    )
    E_WEIGHT_DTYPE_OVERFLOW = (
        "{path}: {name!r} holds values reaching {max_abs:.4g}, beyond {dtype}'s range (the model's weights are "
        "{dtype}), so they would be infinite there and the model would give NaN vectors. Weights this large mean "
        "the training that wrote them diverged: use an earlier checkpoint, or pretrain again with a lower "
        "learning rate."
    )
    E_NATIVE_TENSOR_DTYPE = (
        "Tensor {name!r} in {path} holds {dtype} values, but weights are floating point (float32, float16, "
        "bfloat16). The file is damaged or was not written by BiLM.save(): write the model again with BiLM.save()."
    )
    E_SAVE_EXTRA_NAME = (
        "BiLM.save(extra_tensors=...): {name!r} is not a free name: the biLM's own tensors (bilm.state_dict()) "
        "and initial_h / initial_c are stored under their names, and an extra tensor's name is a string. Name it "
        "otherwise, e.g. with a prefix such as 'softmax.'."
    )
    E_SAVE_EXTRA_TYPE = "BiLM.save(extra_tensors=...) stores tensors; {name!r} is {a_type}. Pass torch tensors."
    E_SAVE_DTYPE_OVERFLOW = (
        "Cannot save {name!r} as {dtype}: its values reach {max_abs:.4g}, beyond {dtype}'s range, so the file "
        "would hold infinities. {fix}"
    )
    E_SAVE_NOT_FINITE = (
        "Cannot save {name!r}: it holds {count} NaN or infinite value(s), so the model would give NaN vectors and "
        "no loader accepts the file. The training that made these weights diverged: save the model of an earlier "
        "checkpoint, or train again from it with a lower learning rate (pretrain --init MODEL_DIR --lr ...)."
    )
    # {fix} of E_SAVE_DTYPE_OVERFLOW: a narrower dtype than the values need; none but the model's own holds them
    E_SAVE_DTYPE_OVERFLOW_WIDER = "Save in {dtypes} (dtype=None keeps the model's {model_dtype})."
    E_SAVE_DTYPE_OVERFLOW_KEEP = (
        "Only the model's own {model_dtype} holds them: save with dtype=None to keep it (BiLM.load reads weights "
        "as float32 and refuses such a file, though). Weights this large mean the training diverged: save an "
        "earlier checkpoint."
    )
    E_SAVE_DTYPE_OVERFLOW_ALLENNLP = (
        "AllenNLP/bilm-tf weights are float32 and cannot hold them. Weights this large mean the training "
        "diverged: export an earlier checkpoint."
    )
    E_NATIVE_CONFIG_FIELDS_MISSING = (
        "The \"config\" of {path} lacks the field(s) {names}; BiLM.save() writes every BiLMConfig field, so "
        "config.json is damaged or was written by hand. Restore it from the original model directory (a "
        "missing clip or activation would otherwise silently change the model)."
    )
    E_NATIVE_EXTRA_NOT_LIST = (
        "{path}: \"extra\" must be a list of tensor names (e.g. [\"softmax.bias\", \"softmax.weight\"], as "
        "BiLM.save() writes it); found {found!r}. Restore config.json from the original model directory."
    )
    E_NATIVE_EXTRA_MISSING = (
        "The model file {path} lacks the tensor(s) {names} that config.json lists as \"extra\" (e.g. the "
        "softmax): the file is incomplete. Copy the model directory again from its source."
    )
    E_MODEL_PATH_MISSING = (
        "{path} does not exist. Pass a model directory (written by BiLM.save, `spacy-elmo pretrain` or "
        "`spacy-elmo export`, or one holding an AllenNLP options.json + .hdf5){or_default}."
    )
    #: E_MODEL_PATH_MISSING's {or_default} where the caller takes the bundled model (fit-state refuses it).
    E_MODEL_PATH_OR_DEFAULT = " or \"default\" for the bundled model"
    #: E_MODEL_PATH_OR_DEFAULT where a Path (not the string) named "default" was given.
    E_MODEL_PATH_OR_DEFAULT_STR = (
        ", or the string \"default\" for the bundled model: a Path(\"default\") names a directory \"default\" here"
    )
    E_PATH_STDIN = (
        "'-' names standard input, which spacy-elmo does not read: it reads text and models from files and "
        "directories. Write what you would pipe in to a file (e.g. `... > text.txt`) and pass that file."
    )
    E_PATH_TILDE = (
        "{path} does not exist: a leading ~ is expanded by a shell, and only where it starts a word unquoted "
        "(not \"~/x\", nor --option=~/x), never by spacy-elmo, Python or a spaCy config. Write the path out, "
        "{expanded} ($HOME/... on a command line), or in Python pass os.path.expanduser(path)."
    )
    E_PATH_EMPTY = (
        "an empty path (an unset shell variable? \"$OUT\" with OUT unset gives one): it would name the current "
        "directory, written into, replaced or read whole. Give the path; for the current directory, write ."
    )
    #: E_PATH_EMPTY's counterpart in the Python API (:func:`spacy_elmo.paths.refuse_empty_path`), where no option name comes
    #: before it; ``what``: the argument, e.g. "The model directory"
    E_PATH_EMPTY_GIVEN = (
        "{what} is an empty path (\"\": an unset variable? os.environ.get(\"OUT\", \"\") gives one): it would name the "
        "current directory, written into or read whole. Pass the path (\".\" where the current directory is meant)."
    )
    E_PATH_EMPTY_MODEL_DIR = "The model directory"
    E_PATH_EMPTY_OPTIONS = "The ELMo options file"
    E_PATH_EMPTY_WEIGHTS = "The weight file"
    E_PATH_EMPTY_EXPORTED = "The exported program file"
    E_OVERWRITE_CWD = (
        "{path} is or holds the current directory ({cwd}), and it is not empty: export would delete everything in "
        "it (hidden files and .git too), the current directory's files among them, even with --overwrite. Choose a "
        "new directory for OUT_DIR."
    )
    E_OUTPUT_PATH_TILDE = (
        "{path} starts with a ~ that no shell expanded (it was quoted, or followed an = as in --option=~/x): "
        "spacy-elmo would create a directory named ~ in the current directory. Write the path out, {expanded}, "
        "or leave the ~ unquoted at the start of a word, or use $HOME/...; for a directory really named ~, "
        "write ./{path}."
    )
    E_ELMO_WEIGHTS_SETTING = (
        "The '{name}' component's weights setting ({setting}), loaded because "
        "[initialize.components.{name}.weights_loader] names no path (--paths.elmo left empty in the shipped "
        "configs), cannot be loaded: {reason} Fix [components.{name}] weights (null: the bundled default "
        "model), or name the weights with --paths.elmo DIR."
    )
    E_ELMO_LOADER_PATH = (
        "The '{name}' component cannot load the weights that {setting} names: {reason} Fix that path, or leave it "
        "empty (\"\") to load [components.{name}] weights (null: the bundled default model)."
    )
    E_ELMO_WEIGHTS_PATH = (
        "The '{name}' component cannot load its weights setting ({setting} of the pipeline's config, set by a "
        "config file or as the 'weights' of nlp.add_pipe('{name}', config={{'weights': ...}})): {reason} Fix that "
        "setting (null: the bundled default model)."
    )
    E_ELMO_WEIGHTS_VARIABLE = (
        "The '{name}' component cannot load the weights that --{section}.{key} names ({setting} = "
        "${{{section}.{key}}} in the config reads [{section}] {key}): {reason} Fix --{section}.{key} on the command "
        "line, or {key} in the config's [{section}] block."
    )
    E_MODEL_PATH_IS_EMBEDDINGS = (
        "{path} is a file of ELMo vectors (the layout `spacy-elmo embed` and `allennlp elmo` write: a dataset of "
        "vectors per input line and sentence_to_index), not a model. Read it with h5py (f[\"0\"] holds line 0's "
        "vectors; json.loads(f[\"sentence_to_index\"][0]) maps a line to its dataset), and load the model that "
        "wrote it with BiLM.load (embed's --model; \"default\" unless given)."
    )
    #: ``fix``: what the caller that was given the file can do (E_MODEL_PATH_FIX_*)
    E_MODEL_PATH_IS_FILE = "{path} is a file, but a model is a directory: {fix}"
    #: E_MODEL_PATH_IS_FILE's ``fix`` for BiLM.load and the rest
    E_MODEL_PATH_FIX_LOAD = (
        "pass the directory that holds it (config.json + model.safetensors, or one options.json + one .hdf5), or "
        "load AllenNLP files with BiLM.from_allennlp(options_file, weight_file)."
    )
    #: E_MODEL_PATH_IS_FILE's ``fix`` where the path is a setting or a command's argument (the spaCy component's
    #: weights, the CLI's MODEL_DIR and --model), or a spacy-elmo model's file given to Elmo & co. with weight_file=None
    E_MODEL_PATH_FIX_DIR = (
        "pass the model's directory (config.json + model.safetensors; for AllenNLP files: the directory holding "
        "options.json and the .hdf5)."
    )
    #: E_MODEL_PATH_IS_FILE's ``fix`` for pretrain --init
    E_MODEL_PATH_FIX_INIT = (
        "pass --init the directory that holds options.json and the .hdf5 (or the spacy-elmo model directory, "
        "config.json + model.safetensors)."
    )
    #: E_MODEL_PATH_IS_FILE's ``fix`` for Elmo, ElmoEmbedder and ElmoTokenEmbedder given weight_file=None
    E_MODEL_PATH_FIX_COMPAT = (
        "pass the weight file as the second argument (options_file, weight_file), or a model directory (config.json "
        "+ model.safetensors, or one options.json + one .hdf5) with weight_file=None."
    )
    E_MODEL_DIR_AMBIGUOUS = (
        "{path} holds two models: a spacy-elmo model ({config}) and AllenNLP weights ({options}, {weights}), "
        "which may differ. Keep one model per directory (move one of them out), or load the AllenNLP files "
        "explicitly with BiLM.from_allennlp(options_file, weight_file)."
    )
    E_PARENT_IS_FILE = "{path} is a file, not a directory, so nothing can be written below it"
    # embed's OUTPUT_PATH (checked before any work), pretrain's OUTPUT_DIR (where its first write was refused)
    E_OUTPUT_NOT_WRITABLE = (
        "{path} cannot be written: no file can be created in {parent} ({error}). Choose an output path in a "
        "writable directory."
    )
    E_OUTPUT_FILE_REFUSED = (
        "{file}, of the run in {path}, is refused to this account ({error}). Give this account read and write "
        "permission on it and write permission on {parent} (chmod u+rw on the file, u+w on the directory; a file "
        "of another account's: run as that account), which --resume needs; or choose a new output path for a new run."
    )
    E_MODEL_DIR_NOT_ENTERABLE = (
        "The model directory {path} cannot be entered ({error}): this account needs permission to enter it and "
        "each directory above it, and to read it. Give it that (chmod u+rx, or a+rx, on each), or copy the model "
        "to a directory of yours."
    )
    E_MODEL_FILE_UNREADABLE = (
        "{path} could not be read ({error}). It must be a readable file: give this account read permission "
        "(chmod), or restore it from the original model directory."
    )
    E_MODEL_FILE_IS_DIR = (
        "{path} is a directory, but the model's {name} is a file: a directory of that name stands where the "
        "file belongs. Move that directory out of the way and put the model's {name} file there (copy it from "
        "the original model directory)."
    )
    # No final full stop: callers embed it as the ``{error}`` of their own message, as an OSError's text.
    E_SAFETENSORS_WRITE = (
        "could not write {path} ({error}); check that its directory exists and is writable and that the disk has room"
    )
    E_SAFETENSORS_DAMAGED = (
        "{path} is damaged or not a safetensors file ({error}); a copy or download may have been cut short. "
        "Copy the model directory again from its source, or write it again with BiLM.save()."
    )

    # --- model inputs (spacy_elmo.bilm.model) -------------------------------
    E_CHAR_IDS_SHAPE = (
        "BiLM expects character ids of shape (batch, max_len, {max_chars}) from "
        "spacy_elmo.batch_to_ids; got shape {shape}. If the last size differs, the ids "
        "were built with another max_characters_per_token than the model's."
    )
    E_CHAR_IDS_DTYPE = (
        "BiLM expects integer character ids (torch.long or torch.int32, on every backend; batch_to_ids gives "
        "torch.long); got {dtype}. Build them with spacy_elmo.batch_to_ids, or convert with ids.long()."
    )
    E_CHAR_IDS_NOT_TENSOR = "{cls} expects a tensor of character ids {shape}; got {a_type}. {fix}"
    E_CHAR_IDS_FROM_NUMPY = "Pass an array of ids as a tensor: {call}(torch.from_numpy(ids))."
    E_CHAR_IDS_FROM_TOKENS = (
        "Convert token lists first: {call}(spacy_elmo.batch_to_ids(sentences)) (ids already in nested lists: "
        "{call}(torch.tensor(ids)))."
    )
    E_BILM_CONFIG_TYPE = (
        "BiLM expects a BiLMConfig; got {a_type}. Use BiLM(BiLMConfig(...)), BiLM(BiLMConfig.preset('small')) "
        "or BiLM(BiLMConfig.from_dict(d)); to load weights, BiLM.load(directory)."
    )
    E_STATEFUL_NOT_BOOL = (
        "stateful must be True (carry each row's states into the next call) or False (every call from the "
        "initial state); got {value!r}."
    )
    E_STATE_NOT_PAIR = (
        "{what} expects None or a pair (h, c) of two tensors, h {expected_h} and c {expected_c} ({axes}); "
        "got {found}."
    )
    E_STATE_NOT_FINITE = (
        "{what} got a state (h, c) holding NaN or infinite values: every vector computed from it would be NaN. "
        "It comes from a diverged model or a broken computation: fit it again (BiLM.fit_initial_state), use a "
        "value read from this model (BiLM.carried_states), or None for zeros."
    )
    E_CHAR_IDS_RANGE = (
        "Character ids must lie in 0..{max_id} (bytes + 1, markers, padding); found "
        "{found}. Build inputs with spacy_elmo.batch_to_ids."
    )
    E_CHAR_IDS_RANGE_IN_GRAPH = (
        "Character ids must lie in 0..{max_id} (bytes + 1, markers, padding); some do not. Build inputs "
        "with spacy_elmo.batch_to_ids." + _IN_GRAPH
    )
    E_RAGGED_MASK_IN_GRAPH = (
        "A row has padding before a real token: tokens must be left-aligned with padding (all-zero rows) "
        "only at the end, as batch_to_ids produces." + _IN_GRAPH
    )
    E_CHAR_IDS_MALFORMED_IN_GRAPH = (
        "A token is not spelled as batch_to_ids spells tokens: a token starts with {bow} (begin-of-word, "
        "shifted by +1) and holds no 0. Build inputs with spacy_elmo.batch_to_ids." + _IN_GRAPH
    )
    E_RAGGED_MASK = (
        "Row {row} has padding before a real token: tokens must be left-aligned with "
        "padding (all-zero rows) only at the end, as batch_to_ids produces."
    )
    E_CHAR_IDS_DEVICE = (
        "The character ids are on {found} but the biLM's weights are on {expected}: move the ids there, "
        "e.g. bilm(ids.to('{expected}')), or the model with bilm.to(device)."
    )
    E_CHAR_IDS_MALFORMED = (
        "Token {position} of row {row} is not spelled as batch_to_ids spells tokens: its ids begin {ids}. A token "
        "starts with {bow} (begin-of-word, shifted by +1) and holds no 0 (0 only fills padded tokens, which are "
        "all 0). Ids of bilm-tf's UnicodeCharsVocabulary are not shifted (begin-of-word 258): add 1 to the real "
        "tokens' ids; ids of a smaller max_characters_per_token cannot be padded with zeros. Build inputs with "
        "spacy_elmo.batch_to_ids."
    )
    E_ENCODE_MASK_SHAPE = (
        "encode_tokens: the mask has shape {found} but the character ids need {expected} (batch, time): one "
        "flag per token position."
    )
    E_ENCODE_MASK_DTYPE = (
        "encode_tokens needs a torch.bool mask (True at real tokens), e.g. char_ids.gt(0).any(-1); got "
        "{found}. An integer mask would index rows instead of selecting them: convert it with mask.bool()."
    )
    E_CONTEXTUALIZE_DTYPE = (
        "contextualize expects floating-point token vectors x and integer lengths (torch.long), both tensors; "
        "got x {found_x} and lengths {found_lengths}. Pass encode_tokens' output and the token counts, e.g. "
        "mask.sum(1)."
    )
    E_CONTEXTUALIZE_SHAPE = (
        "contextualize expects token vectors x (batch, max_len + 2, {proj}) (<S>, the tokens, </S>, then zeros) "
        "and lengths (batch,); got x {found_x} and lengths {found_lengths}."
    )
    E_TOKEN_CACHE_DEVICE = (
        "TokenCache: device {found} is not the biLM's ({expected}), where the cache's vectors live with the char "
        "encoder's weights. Pass device=torch.device('{expected}'), or move the model there with bilm.to(device)."
    )
    E_CONTEXTUALIZE_DEVICE = (
        "contextualize: the token vectors x are on {found} but the biLM's weights are on {expected}: move x "
        "there (x.to('{expected}')), or the model with bilm.to(device)."
    )
    E_CONTEXTUALIZE_X_DTYPE = (
        "contextualize: the token vectors x are {found} but the biLM takes {accepted}: convert x "
        "(x.to({expected})), or the model (bilm.to({found}))."
    )
    E_BILM_AUTOCAST_DTYPE = (
        "The biLM's weights are {weights} but {device} autocast is on in {autocast}, which torch does not mix "
        "with them (only float32 and float64 weights run under any autocast): run a float32 model under autocast "
        "(bilm.float()), or autocast in the weights' dtype (torch.autocast('{device}', dtype={weights}))."
    )
    E_CONTEXTUALIZE_LENGTHS = (
        "contextualize: lengths count the tokens without the markers, so each must lie in 0..{max_len} "
        "(x.shape[1] - 2); got {found}."
    )
    E_CONTEXTUALIZE_LENGTHS_IN_GRAPH = (
        "contextualize: lengths count the tokens without the markers, so each must lie in 0..x.shape[1] - 2; "
        "some do not." + _IN_GRAPH
    )
    E_REFERENCE_EXPORT_DYNAMIC_TIME = (
        "torch.export cannot give the reference backend a dynamic time dimension: its LSTM runs a Python "
        "loop over the time steps, which tracing unrolls for one length. Export a model with backend='fused' "
        "(dynamic batch and time), or give the time dimension a fixed size (no Dim for dimension 1)."
    )
    E_BILM_TORCHSCRIPT = (
        "{tool} does not support BiLM: TorchScript cannot compile its ops' Python dispatch, and a trace "
        "would fix the sentence length and drop the checks of the ids. Use torch.compile(bilm) (dynamic "
        "batch and sentence length on the fused backend) or torch.export.export for a saved program; "
        "see the README's Python API section."
    )
    E_BILM_VMAP = (
        "torch.func.vmap over BiLM is not supported: it already takes a batch, char ids (batch, time, {max_chars}), "
        "and its checks of the ids read their values, which vmap cannot. Pass the batch directly (batch_to_ids of "
        "all the sentences; bilm(ids)); vmap over the fused ops alone works (see the README's torch.func notes)."
    )
    E_EXPORT_STATEFUL = (
        "torch.export cannot export BiLM(stateful=True): the states it carries from call to call live in "
        "Python, outside the exported program, which would silently start every call from the initial "
        "state. Export a stateless model (BiLM(config, stateful=False), or set bilm.stateful = False)."
    )
    E_EXPORT_NEEDS_GRAPH_CHECKS = (
        "torch.export of BiLM needs torch >= {since} (this is torch {torch}): before it the checks of the "
        "ids' values cannot go into the exported graph (they are dropped or fail to trace), so the model "
        "checks them in Python, which an exported program cannot keep. Upgrade torch, or run the model "
        "eagerly or under torch.compile without fullgraph=True (it checks the ids through a graph break)."
    )
    E_UNKNOWN_BACKEND = "Unknown backend {name!r}: use 'auto', 'fused' or 'reference'."
    E_BAD_RECYCLE_LIMIT = (
        "set_cpu_recycle_limit expects a whole number of bytes >= 0 (0 turns recycling "
        "off; the default is {default}), got {value!r}."
    )
    E_BILSTM_STATE = (
        "bilstm_layer's state must be None (zeros) or a pair (h0, c0): h0 (2, B, P) and c0 (2, B, C), each "
        "either one tensor indexed by direction or a pair (forward, backward) of (B, P) / (B, C) tensors; "
        "got {found}."
    )
    E_LSTM_SHAPE = (
        "lstm: {name} must have shape {expected}, got {found} (B from x (B, T, I), C and P from w_proj (C, P)). "
        "Nothing is broadcast over the rows: expand a state shared by every row to B rows first."
    )
    # The fused op's words (csrc/include/checks.h: check_integer, check_lstm_lengths), with the fix.
    E_LSTM_WEIGHT_SHAPE = (
        "lstm: {name} must have shape {expected}, got {found} (I from x (B, T, I), C and P from w_proj (C, P)). "
        "Pass each direction's weights in the TF layout: w_input (I, 4C), w_recurrent (P, 4C), bias (4C,) with "
        "the gate blocks i, j, f, o, w_proj (C, P); nothing is reshaped."
    )
    E_LSTM_RESIDUAL = (
        "lstm: residual needs input dim == projection dim, got I = {I} and P = {P}: a residual layer adds its "
        "input x (B, T, I) to its output (B, T, P). Pass residual=False, or an input of P features."
    )
    E_MIXED_DTYPES = (
        "{op}: {name} is {dtype} but {main} is {main_dtype}: outside torch.autocast an op computes in one dtype. "
        "Pass every floating argument in {main_dtype} (e.g. module.to({main_dtype}), or convert the state), or "
        "run under torch.autocast."
    )
    E_MIXED_FLOAT64_AUTOCAST = (
        "{op}: {name} is {dtype} but {main} is {main_dtype} under torch.autocast, which casts no float64 tensor: "
        "float64 mixes with no other floating dtype there. Pass every floating argument in one dtype (e.g. "
        "module.float() to run a float64 model under autocast), or run the float64 model outside torch.autocast."
    )
    E_LSTM_LENGTHS_DTYPE = (
        "lstm: lengths must be an integer tensor (any integer dtype, read as int64), got {dtype}: a fractional "
        "length would run part of a step. Pass each row's number of valid positions as whole numbers, e.g. "
        "lengths.long()."
    )
    E_LSTM_LENGTHS_RANGE = (
        "lstm: lengths holds {value} at flat index {index}; its values must lie in [0, {T}] (a row's number of "
        "valid positions, at most T). Pass each row's count of valid positions of x (B, T, I)."
    )
    E_LSTM_LENGTHS_RANGE_IN_GRAPH = (
        "lstm: lengths must lie in [0, T] (a row's number of valid positions, at most T); some do not. Pass "
        "each row's count of valid positions of x (B, T, I)." + _IN_GRAPH
    )
    E_LSTM_NO_UNITS = (
        "lstm: w_proj (C, P) must have at least one cell and one projection unit, got {found}: a layer of none "
        "has nothing to compute (check the config's cell_dim and projection_dim)."
    )
    # The fused op's words (csrc/include/checks.h: check_lstm), with the fix.
    E_LSTM_NO_INPUT = (
        "lstm: x (B, T, I) must have at least one input feature, got {found}: an LSTM layer of no inputs is "
        "refused (a biLM layer reads projection_dim features). Pass the token vectors (B, T, I >= 1) as x, with "
        "w_input (I, 4C)."
    )
    E_LSTM_CLIP = (
        "lstm: {name} must be >= 0, got {value!r}: a clip bounds the values to [-{name}, {name}]. Pass a "
        "non-negative number, or None for no clip."
    )
    E_BILSTM_INPUT_SHAPES = (
        "lstm: every direction's input must have the same shape, got x_fwd {fwd} and x_bwd {bwd}: both "
        "directions run over the same rows, positions and lengths. Pass the two streams of one batch (B, T, I)."
    )
    E_CHAR_CNN_BIASES = (
        "char_cnn: one bias per filter, got {biases} biases for {filters} filters: each filter weight "
        "(count_i, D, width_i) takes a bias (count_i,). Pass the biases in the filters' order."
    )
    # The fused op's words (csrc/include/checks.h: check_char_cnn_filters, check_char_cnn_biases), with the fix.
    E_CHAR_CNN_WEIGHT = (
        "char_cnn: weight {index} must be (count, D, width) with D = {D}, got {found}: a filter reads the D "
        "features of each character's embedding (261, D). Pass the filters in nn.Conv1d's layout."
    )
    E_CHAR_CNN_BIAS = (
        "char_cnn: {name} must have shape {expected}, got {found}: one bias per channel of its filter "
        "(count_i, D, width_i). Pass the biases in the filters' order."
    )
    # The fused op's words (csrc/include/checks.h: check_highway_forward), with the fix.
    E_HIGHWAY_SHAPE = (
        "highway: {name} must have shape {expected}, got {found} (F from x (N, F)). Pass the layer's weight "
        "(2F, F), rows [transform; carry], and its bias (2F,); nothing is broadcast."
    )
    E_SAMPLED_HIT_RANGE = (
        "sampled_logsumexp: hit[{index}] = {value} is outside [-1, {S}): a row's hit is the column of its own "
        "target among the S candidates, or -1 for none. Pass each row's candidate column or -1."
    )
    # The fused op's words (csrc/cpu/sampled_softmax.cpp: check_inputs), with the fix.
    E_SAMPLED_NO_CANDIDATES = (
        "sampled_logsumexp: no candidates (S = 0): weight (S, P) is {shape}, and a log-sum-exp over no candidates "
        "has no value. Pass at least one candidate: weight (S, P) and offset (S,) with S >= 1."
    )
    # The fused op's words (csrc/cpu/sampled_softmax.cpp: check_inputs), with the fix.
    E_SAMPLED_H_WEIGHT = (
        "sampled_logsumexp: h must be (N, P) and weight (S, P), got {h} and {weight}: each of the N rows of h "
        "is scored against the S candidates' rows. Pass both as matrices of the same width P."
    )
    E_SAMPLED_HIT_DTYPE = (
        "sampled_logsumexp: hit must be an integer tensor (any integer dtype, read as int64), got {dtype}: a float "
        "would be truncated and a bool read as 0/1. Pass each row's candidate column (or -1) as whole numbers, "
        "e.g. hit.long()."
    )
    E_SAMPLED_SHAPE = (
        "sampled_logsumexp: {name} must have shape {expected}, got {found} (N from h (N, P), S from weight (S, P)). "
        "Nothing is broadcast: pass one offset per candidate and one hit (its column, or -1) per row of h."
    )
    E_SAMPLED_HIT_RANGE_IN_GRAPH = (
        "sampled_logsumexp: hit must lie in [-1, {S}) (a row's candidate column, or -1 for none); some do not. "
        "Pass each row's candidate column or -1." + _IN_GRAPH
    )
    E_NOT_FLOAT = (
        "The {op} op computes in real floating point, but {name} is {dtype}: it takes no integer, bool or complex "
        "tensor there. Pass float32/float64 (or float16/bfloat16) tensors: convert {name} with .float()."
    )
    E_FUSED_DOUBLE_BACKWARD = (
        "The fused {op} kernel has no second derivative: a gradient computed through it with create_graph=True is "
        "being differentiated (a gradient penalty, a Hessian-vector product, ...). Run that model with "
        "backend='reference', whose operations PyTorch differentiates twice."
    )
    E_SAMPLED_LOGSUMEXP_DOUBLE_BACKWARD = (
        "sampled_logsumexp has no second derivative on either backend (its backward reuses, in place, the "
        "softmax its forward saved; the fused kernel has no formula of its own): a gradient computed through it "
        "with create_graph=True is being differentiated (a gradient penalty, a Hessian-vector product, ...). "
        "Where a second derivative is needed, take torch.logsumexp of the logits h @ weight.T + offset, with "
        "each row's hit column set to the lowest float, instead."
    )
    E_SAMPLED_LOGSUMEXP_BACKWARD_TWICE = (
        "sampled_logsumexp's backward ran a second time through one graph (a backward with retain_graph=True, "
        "then another): the first one consumed the softmax it saved, overwriting it in place with the "
        "gradient. Sum the losses and call backward once, or compute the loss again for each backward."
    )
    E_FUSED_UNAVAILABLE = (
        "backend='fused' needs the compiled extension spacy_elmo._C, which is not "
        "available ({reason}). {fix} Or use backend='reference'."
    )
    E_EXPORTED_NEEDS_FUSED = (
        "{path} is a biLM exported with the fused backend: it calls the kernels of spacy_elmo._C "
        "(torch.ops.spacy_elmo), which is not available here ({reason}). {fix} "
        "Or export the model again with backend='reference', whose program needs no extension."
    )
    E_FUSED_NO_CUDA_KERNELS = (
        "backend='fused' on CUDA tensors needs the CUDA kernels of spacy_elmo._C, which this build lacks (it "
        "found no CUDA toolkit: nvcc / CUDA_HOME). Install the CUDA toolkit of torch's CUDA ({cuda}) and "
        "build it again with SPACY_ELMO_CUDA=1 set: " + _rebuild("SPACY_ELMO_CUDA=1") + " (`spacy-elmo info` shows what was "
        "built). Or use backend='auto', which runs the reference path on CUDA here, or backend='reference'."
    )
    E_SCALAR_MIX_COUNT = (
        "ScalarMix was built for {expected} layers but received {found}; the biLM has "
        "n_layers + 1 output layers."
    )
    E_SCALAR_MIX_INIT = (
        "initial_weights has {found} values; ScalarMix has {expected} layers. Give one weight (before softmax) per "
        "biLM output layer ({expected}: n_layers + 1), or initial_weights = null for equal weights."
    )
    E_SCALAR_MIX_MASK = "ScalarMix with do_layer_norm=True needs the mask (batch, time)."
    E_SCALAR_MIX_SIZE = (
        "ScalarMix needs n_layers >= 1 (a whole number: the biLM's n_layers + 1 output layers); found {value!r}."
    )
    E_SCALAR_MIX_INIT_VALUES = (
        "initial_weights must be a list of numbers (one weight per layer, before softmax); found {value!r}."
    )
    E_SCALAR_MIX_INIT_NAN = (
        "initial_weights {value} must all be finite numbers (as float32): a NaN or +inf gives no layer weights "
        "(every mixed vector NaN), and a -inf turns the mix weights NaN at the first training step. Use finite "
        "numbers; a very negative one (-1e9) leaves its layer out."
    )
    E_FLAG_NOT_BOOL = "{name} must be True or False; found {value!r}."
    E_SCALAR_MIX_LAYER_TYPE = (
        "ScalarMix mixes tensors, but layer {index} is {a_type}. Pass the biLM's out.activations (a list of "
        "(batch, time, 2P) tensors) or torch.stack(out.activations)."
    )
    E_SCALAR_MIX_TENSOR = (
        "ScalarMix got one tensor of shape {shape}; it mixes a list of layers (the biLM's out.activations) or "
        "one stacked (n_layers, batch, time, dim) tensor. One doc's layers (n_layers, time, dim), as spaCy's "
        "doc._.elmo holds them, need a batch dimension: mix(torch.from_numpy(doc._.elmo)[:, None]) gives "
        "(1, time, dim). A single layer (batch, time, dim) would be mixed over its batch rows: pass "
        "out.activations, or torch.stack(out.activations)."
    )
    E_SCALAR_MIX_MASK_SHAPE = (
        "ScalarMix: the mask has shape {found} but the layers need {expected} (batch, time). Pass the mask "
        "of the same biLM output (out.mask)."
    )
    E_SCALAR_MIX_DEVICE = (
        "ScalarMix: {what} is on {found} but the mix's weights are on {expected}. Move the mix with the biLM "
        "(mix.to(device)), or the activations to the mix."
    )
    E_SCALAR_MIX_SHAPES = (
        "ScalarMix mixes layers of one shape, but layer {index} is {found} and layer 0 is {expected}. Pass the "
        "biLM's activations of one batch (every layer (batch, time, 2P))."
    )

    # --- spaCy pipeline (spacy_elmo.pipeline) --------------------------------
    E_ELMO_NO_WEIGHTS = (
        "The '{name}' component has no biLM weights: none were given and no bundled "
        "default model is installed ({reason}). Give weights with "
        "nlp.add_pipe('elmo', config={{'weights': PATH}}) (PATH: a directory written by "
        "BiLM.save, or one holding an AllenNLP options.json + .hdf5), or in a training "
        "config set [initialize.components.{name}.weights_loader] path (e.g. "
        "`--paths.elmo PATH`) before nlp.initialize()."
    )
    E_WEIGHTS_ARE_PIPELINE = (
        "{given}, not biLM weights (a directory written by "
        "BiLM.save or `spacy-elmo export`, or one with an AllenNLP options.json + .hdf5). To reuse the biLM of "
        "its elmo component (with the weights it was trained or fine-tuned with there), source the component: "
        "[components.elmo] source = {config_pipeline} in a training config, or nlp.add_pipe('elmo', "
        "source=spacy.load({py_pipeline})); or export it as weights, `spacy-elmo export {shell_pipeline} ELMO_DIR "
        "--format native`, and give ELMO_DIR."
    )
    E_PIPELINE_NO_BILM = (
        "The saved spaCy pipeline {pipeline} holds no biLM: none of its components ({components}) is an elmo "
        "component or one given its own copy of the biLM by nlp.replace_listeners. Export the weights the "
        "pipeline was built with instead (its [components.elmo] weights, or its training's --paths.elmo)."
    )
    E_PIPELINE_WHICH_BILM = (
        "The saved spaCy pipeline {pipeline} has {n_elmo} elmo components, and the biLMs it holds are those of "
        "{choices}: name the one to export with --component NAME."
    )
    E_PIPELINE_COMPONENT_NO_BILM = (
        "The saved spaCy pipeline {pipeline} has no component {component!r} that holds a biLM (its components: "
        "{components}); those that do: {choices}. Name one of them with --component NAME."
    )
    E_ELMO_BAD_OPTION = "The '{name}' component: {option} must be one of {choices}; got {value!r}."
    E_LISTENER_WIDTH = (
        "The ELMo listener in '{component}' expects width {width}, but the upstream "
        "'{upstream}' biLM produces {expected} (2 x projection_dim). Set width = null "
        "(inferred from the weights) or {expected} in its ElmoListener config."
    )
    E_LISTENER_NO_UPSTREAM = (
        "An ELMo listener (upstream {upstream!r}) is linked to no elmo component: spaCy links a listener only "
        "to an elmo component{named} placed before the listening component in the pipeline. Put one there (in "
        "a config, before the listening component in [nlp] pipeline and after any sentencizer; in Python, "
        "nlp.add_pipe('elmo', before={component})), or set the listener's upstream to your elmo component's name "
        "('*': any). A pipeline loaded with exclude=['elmo'] has none: load it with its elmo component, or "
        "give the listening component its own copy of the biLM before saving it without elmo: {replace}."
    )
    E_LISTENER_COPY_UNLINKED = (
        "The ELMo listener in {component} is a copy (thinc's Model.copy: nlp.replace_listeners copies a component "
        "that listens to elmo itself, such as a tok2vec with spacy_elmo.ElmoTok2Vec.v1, into each component "
        "listening to it) that no elmo component has linked yet: spaCy links listeners when it builds, loads or "
        "initializes a pipeline and when a component is added, renamed or removed, not in replace_listeners. "
        "Reload the pipeline to link it: nlp.from_bytes(nlp.to_bytes()), or nlp.to_disk(PATH) and "
        "spacy.load(PATH). (A component sourced with replace_listeners in a config is linked as it is added.)"
    )
    #: E_LISTENER_NO_UPSTREAM's (and the other listener errors') ``replace`` (``path``: the listener's, when its config
    #: is known)
    E_LISTENER_REPLACE_CALL = "nlp.replace_listeners({elmo}, {component}, [{path!r}])"
    #: E_LISTENER_NO_UPSTREAM's ``replace`` when the listener's config path is not known
    E_LISTENER_REPLACE_CALLS = (
        "nlp.replace_listeners({elmo}, {component}, ['model.tok2vec.elmo']) with spacy_elmo.ElmoTok2Vec.v1 (as in "
        "the shipped configs), or with ['model.tok2vec'] when the ElmoListener.v1 block is the component's tok2vec"
    )
    E_LISTENER_NO_DATA = (
        "An ELMo listener in '{component}' found no ELMo data on a document (doc._.elmo is empty). The "
        "upstream '{upstream}' component must run before '{component}' and keep all layers (store = \"all\"); "
        "check that it is not disabled or removed. To run '{component}' without '{upstream}', first give it "
        "its own copy of the biLM: {replace}."
    )
    E_LISTENER_BATCH = (
        "The ELMo listener in '{component}' got a batch it has no upstream output for ({batch}). Keep the "
        "'{upstream}' component in the pipeline and in the update (not removed, disabled or left out with "
        "nlp.update(..., exclude=[...])) and out of [training] frozen_components (it freezes itself: frozen = "
        "true) so that its update() feeds the listeners, or list it in annotating_components. To train '{component}' without '{upstream}', "
        "first {replace}. An annotating component "
        "between them that retokenizes the docs is fine when it changes them in place (doc.retokenize(), as "
        "merge_entities does): one that returns new Doc objects with other tokens gives the listener docs it "
        "has no layers for."
    )
    #: E_LISTENER_BATCH's ``batch`` for docs of other words than the upstream handed over
    E_LISTENER_BATCH_OTHER = "batch id {found}, expected {expected}"
    #: E_LISTENER_BATCH's ``batch`` for the same words in other Doc objects
    E_LISTENER_BATCH_NEW_DOCS = (
        "batch id {found}: the same words as the batch '{upstream}' last handed over, but other Doc objects "
        "(new Examples), which '{upstream}' did not run on"
    )
    E_LISTENER_UPSTREAM_DISABLED = (
        "The ELMo listener in {component} reads the layers of the elmo component '{upstream}', which is disabled in "
        "this pipeline (nlp.select_pipes(disable=...), nlp.disable_pipe or spacy.load(..., disable=...)): a disabled "
        "component runs neither in nlp(text) nor in nlp.update, so it gave {component} no layers for these docs. "
        "Enable it (nlp.enable_pipe('{upstream}'), or leave the select_pipes block). To run {component} without "
        "'{upstream}', give it its own copy of the biLM while '{upstream}' is enabled (spaCy's replace_listeners finds "
        "enabled components only): first nlp.enable_pipe('{upstream}') (or leave the select_pipes block), then "
        "{replace}, then nlp.disable_pipe('{upstream}') or nlp.remove_pipe('{upstream}') if you like."
    )
    E_LISTENER_UPSTREAM_REMOVED = (
        "The ELMo listener in {component} reads the layers of the elmo component '{upstream}', which was removed "
        "from this pipeline (nlp.remove_pipe('{upstream}')): nothing gave {component} layers for these docs, and spaCy's "
        "replace_listeners finds only components in the pipeline, so it cannot give {component} its own biLM now. "
        "Reload the saved pipeline (spacy.load), or add an elmo component with the weights {component} was trained "
        "on back before it: nlp.add_pipe('elmo', name='{upstream}', before={component}, config={{'weights': "
        "WEIGHTS}}) with the weights '{upstream}' had, or nlp.add_pipe('{upstream}', before={component}, "
        "source=spacy.load(PIPELINE)) from a pipeline saved with it (the only way back to weights it fine-tuned). "
        "To run {component} without it, then {replace}, then nlp.remove_pipe('{upstream}')."
    )
    E_LISTENER_REHEARSE = (
        "nlp.rehearse cannot train '{component}' through its ELMo listener: spaCy's rehearsal calls the "
        "components in random order and '{upstream}' feeds no listener there. Give '{component}' its own "
        "copy of the biLM first: {replace}, then nlp.resume_training() again, or leave '{component}' out: nlp.rehearse(..., exclude=['{component}'])."
    )
    E_LISTENER_NOT_FED = (
        "The ELMo listener in '{component}' got no ELMo layers for a training batch: its upstream '{upstream}' "
        "did not run update() on it (it is listed in [training] frozen_components, excluded, disabled or "
        "removed) and did not annotate the docs. Keep '{upstream}' out of frozen_components: it freezes itself "
        "(frozen = true). To keep a sourced '{upstream}' in frozen_components, also list it in [training] "
        "annotating_components. To train '{component}' without '{upstream}', first {replace}."
    )
    E_LISTENER_NO_SIZES = (
        "The ELMo listener in '{component}' is initialized before its upstream '{upstream}' loaded its "
        "weights, so the layers after it cannot be sized. nlp.initialize (spacy train) initializes the "
        "components in pipeline order and skips those in [training] frozen_components: put '{upstream}' "
        "before '{component}' in [nlp] pipeline, and keep it out of frozen_components (it freezes itself: "
        "frozen = true)."
    )
    #: E_LISTENER_NO_SIZES where the upstream is disabled, not by spacy train's [training] frozen_components
    E_LISTENER_NO_SIZES_DISABLED = (
        "The ELMo listener in '{component}' is initialized while its upstream '{upstream}' is disabled "
        "(nlp.select_pipes, nlp.disable_pipe, spacy.load(..., disable=...), or [nlp] disabled in a config): "
        "nlp.initialize initializes the enabled components only, so '{upstream}' loaded no weights and the layers "
        "after the listener cannot be sized. Initialize with '{upstream}' enabled: nlp.enable_pipe('{upstream}') "
        "first, or call nlp.initialize outside the select_pipes block (select_pipes(enable=...) disables every "
        "component it does not name). '{component}' reads its layers in nlp.update too, so keep '{upstream}' "
        "enabled while training."
    )
    #: E_LISTENER_NO_SIZES where spacy train (init_nlp) initializes with the upstream in the config's [nlp] disabled
    E_LISTENER_NO_SIZES_DISABLED_CONFIG = (
        "The ELMo listener in '{component}' is initialized while its upstream '{upstream}' is disabled by the "
        "training config's [nlp] disabled (or spacy train's --nlp.disabled): spacy train initializes the enabled "
        "components only, so '{upstream}' loaded no weights and the layers after the listener cannot be sized. "
        "Remove '{upstream}' from [nlp] disabled (and from --nlp.disabled): '{component}' reads its layers in "
        "training and in the trained pipeline, so keep '{upstream}' enabled. To keep its weights as they are, "
        "enabled, leave its frozen setting true (the default)."
    )
    #: E_LISTENER_NO_SIZES where spacy train (init_nlp) initializes with the upstream in both [training]
    #: frozen_components and [nlp] disabled: both named at once (each alone said only its own, the other next run)
    E_LISTENER_NO_SIZES_FROZEN_AND_DISABLED = (
        "The ELMo listener in '{component}' is initialized while its upstream '{upstream}' is both in the training "
        "config's [training] frozen_components and in its [nlp] disabled (or spacy train's "
        "--training.frozen_components and --nlp.disabled): spacy train initializes neither, so '{upstream}' loaded "
        "no weights and the layers after the listener cannot be sized. Remove '{upstream}' from both lists (and "
        "from those options): '{component}' reads its layers in training and in the trained pipeline, so keep "
        "'{upstream}' enabled and out of frozen_components. To keep its weights as they are, leave its frozen "
        "setting true (the default): it freezes itself."
    )
    E_LISTENER_OTHER_DATA = (
        "The ELMo listener in '{component}' reads the layers of '{upstream}' ({nL} layers of width {nO}), "
        "but doc._.elmo holds an array of shape {shape}: another elmo component wrote doc._.elmo after "
        "'{upstream}'. Run the pipeline on the docs in one go (nlp(text), nlp.pipe(texts)), where each "
        "listener gets the layers of its own upstream, or give '{component}' its own copy of the biLM: {replace}."
    )
    E_LISTENER_OTHER_BILM = (
        "'{component}' was trained on the layers of a biLM with {nL} output layers of width {nO}, but "
        "'{upstream}' loaded weights ({source}) with {layers} layers of width {width}. Give '{upstream}' the "
        "weights '{component}' was trained with: source both from the same pipeline ([components.{upstream}] "
        "source = PIPELINE), or set [initialize.components.{upstream}.weights_loader] path (--paths.elmo) to "
        "those weights; or train '{component}' anew instead of sourcing it."
    )
    E_LISTENER_BUILT_UPON = (
        "'{component}' was initialized on the layers of '{upstream}' ({nL} layers of width {nO}): its layers "
        "after the ELMo listener are sized for them, but the weights being loaded ({source}) have {layers} "
        "layers of width {width}, which they cannot read. Refused; '{upstream}' keeps its weights. Load "
        "weights of width {nO} with {nL} layers, or give '{component}' layers sized for the new ones (it "
        "cannot be re-initialized in place: thinc keeps the sizes of trained layers): remove it "
        "(nlp.remove_pipe('{component}')), load the weights, then add it anew and initialize and train it "
        "(or train the pipeline anew: spacy train with --paths.elmo naming the new weights)."
    )
    E_LISTENER_NEEDS_ALL = (
        "The '{name}' component stores {store!r} but '{component}' listens to it and "
        "needs all layers: set store = \"all\" on '{name}'."
    )
    E_ELMO_MODEL_SETTING = (
        "The elmo component's model (spacy_elmo.ElmoBiLM) got {setting} = {value!r}; it must be an "
        "integer >= {minimum} ({meaning}). Fix {setting} in the component's model config block (e.g. "
        "[components.elmo.model]), or leave it out for the default."
    )
    E_ELMO_MODEL_BACKEND = (
        "The elmo component's model (spacy_elmo.ElmoBiLM) got backend = {value!r}; it must be one of {choices} "
        "(\"auto\": the compiled kernels when they load, else the pure-PyTorch reference). Fix backend in the "
        "component's model config block (e.g. [components.elmo.model]), or leave it out for the default."
    )
    E_LISTENER_DROPOUT = (
        "The ELMo listener{of_component} has dropout = {value!r}; it must be a finite number >= 0 and < 1 (ELMo's "
        "dropout after the mix; 0: none): at 1 or more the task would train on zeroed ELMo features and run "
        "on the real ones. Fix dropout in its spacy_elmo.ElmoListener.v1 block ([components.{component}.model."
        "tok2vec.elmo] in the shipped configs), or leave it out for the default 0.5. For a saved pipeline, fix "
        "it in PIPELINE/config.cfg: dropout only matters in training, so any value in [0, 1) loads the "
        "pipeline unchanged."
    )
    E_LISTENER_MIX_L2 = (
        "The ELMo listener{of_component} has {key} = {value!r} (its {block} block); it must be a finite number >= 0 "
        "(the lambda of lambda * ||w||^2 on the mix weights; 0: none): a negative one rewards large mix weights "
        "and an infinite one makes them NaN. Fix {key} in that block, or leave it out for the default 0. For a "
        "saved pipeline, fix it in PIPELINE/config.cfg: {key} only matters in training, so any finite value "
        ">= 0 loads the pipeline unchanged."
    )
    E_LISTENER_INITIAL_WEIGHTS = (
        "The ELMo listener{of_component} has initial_weights = {value!r} (its {block} block); each must be a "
        "number, the weight (before softmax) of one biLM output layer: true/false would be read as 1/0 and text "
        "as the number it spells. Fix initial_weights in that block (e.g. [0.0, 0.0, 1.0]), or leave it out "
        "(null) for equal weights."
    )
    E_LISTENER_INITIAL_WEIGHTS_COUNT = (
        "The ELMo listener{of_component} has {found} initial_weights (its {block} block), but the layers it "
        "mixes are {expected}: give one weight (before softmax) per biLM output layer ({expected}: the biLM's "
        "n_layers + 1), or leave initial_weights out (null) for equal weights."
    )
    E_LISTENER_WIDTH_SETTING = (
        "The ELMo listener{of_component} has width = {value!r}; it must be a whole number >= 1 (2 x projection_dim "
        "of the upstream biLM; true/false is no width) or null. Fix width in its spacy_elmo.ElmoListener.v1 "
        "block ([components.{component}.model.tok2vec.elmo] in the shipped configs), or set it to null to take it "
        "from the weights."
    )
    E_LISTENER_LEARN_RATE_SCALE = (
        "The ELMo listener{of_component} has learn_rate_scale = {value!r}; it must be a number above 0 (the learning "
        "rate of the biLM it owns over the optimizer's, e.g. 0.01; true/false is no number). Fix learn_rate_scale in "
        "its spacy_elmo.ElmoListener.v1 block ([components.{component}.model.tok2vec.elmo] in the shipped configs); "
        "frozen = true keeps the biLM fixed."
    )
    E_ELMO_LAYER_CACHE = (
        "The '{name}' component got layer_cache_mb = {value!r}; it must be an integer >= 0 (MB of biLM "
        "output layers cached per sentence, 0 for none). It is a training-run setting: "
        "[initialize.components.{name}] layer_cache_mb = N in a training config, or "
        "nlp.get_pipe('{name}').layer_cache_mb = N in Python."
    )
    E_ELMO_LEARN_RATE_SCALE = (
        "The '{name}' component: learn_rate_scale must be a number above 0 (the fine-tuned biLM's learning rate "
        "over the optimizer's, e.g. 0.01); got {value!r}."
    )
    E_ELMO_MIX_VALUES = (
        "The '{name}' component: mix must be null (the average of the layers) or a list of numbers, one "
        "weight per biLM output layer (before softmax); got {value!r}."
    )
    E_ELMO_MIX_LENGTH = (
        "The '{name}' component: mix has {found} value(s), but its biLM ({source}) has {expected} output "
        "layers (n_layers + 1). Give {expected} weights (before softmax), or mix = null for the average."
    )
    # a saved pipeline's biLM (bilm_layer._serialize_runner / _deserialize_runner); {path}: the component read
    E_ELMO_SAVE_NOT_FINITE = (
        "Cannot save the elmo biLM: its weight {name!r} holds {count} NaN or infinite value(s), so the saved "
        "pipeline would give NaN vectors. Its training diverged: spacy train stops at its first checkpoint after "
        "that (the directory nlp.to_disk began is incomplete and does not load). Use the pipeline saved before "
        "(spacy train's model-best), or train again with a lower learning rate or the biLM frozen "
        "([components.elmo] frozen = true)."
    )
    E_ELMO_LOAD_NOT_FINITE = (
        "{path}: the saved biLM weight {name!r} holds {count} NaN or infinite value(s), so the pipeline would "
        "give NaN vectors. It was saved after its training diverged, or the file is damaged: load an earlier "
        "save of the pipeline (spacy train's model-best), or train again with a lower learning rate."
    )
    E_ELMO_MODEL_INCOMPLETE = (
        "{path} cannot be read ({err}): the elmo component's saved model is incomplete or damaged. A save that "
        "was refused (a biLM weight held NaN or infinite values) or interrupted leaves it so: load the pipeline "
        "saved before (spacy train's model-best), or save the pipeline again with nlp.to_disk()."
    )
    E_ELMO_LOAD_DTYPE = (
        "{path}: the saved biLM weight {name!r} holds {dtype} values, but weights are floating point. The saved "
        "pipeline is damaged or was not written by spacy-elmo: save it again with nlp.to_disk()."
    )

    E_ELMO_TOKENS_CHANGED = (
        "doc._.elmo has rows for {rows} tokens but the doc now has {n_tokens}, and it carries no token offsets "
        "(doc._.elmo_idx) to match them up: the doc was retokenized after the elmo component ran and its ELMo "
        "data came without offsets (set by hand, or by an older spacy-elmo). Run the elmo component again on "
        "the doc (nlp.get_pipe('elmo')(doc))."
    )
    E_ELMO_SIMILARITY_WIDTHS = (
        "similarity() compares ELMo vectors of width {width} and {other}: the two were annotated by elmo "
        "components with other weights, whose vectors cannot be compared. Annotate both with the same weights "
        "(run one elmo component on both docs)."
    )
    E_ELMO_SIMILARITY_TYPE = (
        "{obj}.similarity() was given {a_type}: it compares with a Token, Span, Doc or Lexeme (as spaCy's own). "
        "For a text, compare with nlp(text) (a Doc) or a token or span of it."
    )
    E_OWN_BILM_NO_WEIGHTS = (
        "An ELMo listener with its own biLM (the 'bilm' setting of spacy_elmo.ElmoListener.v1, written by "
        "nlp.replace_listeners) has no weights: they come only with the component's saved model. Load the "
        "pipeline with spacy.load, or in a training config source the component ([components.NAME] source = "
        "PIPELINE) instead of initializing it; to train from scratch, listen to an 'elmo' component (bilm = null)."
    )
    E_REPLACE_LISTENER_PATH = (
        "nlp.replace_listeners('{upstream}', '{component}', ['{given}']): the spacy_elmo.ElmoListener.v1 block "
        "of '{component}' is at {expected}, not {given}; replacing there would save a pipeline whose config "
        "no longer matches its model (spacy.load fails: mismatched structure). Pass ['{expected}'] (also in a "
        "sourced component's replace_listeners setting)."
    )
    E_REPLACE_LISTENER_CFG = (
        "nlp.replace_listeners('{upstream}', ...) found no spacy_elmo.ElmoListener.v1 block in the listening "
        "component's [model.tok2vec] config; it can only replace ElmoListener.v1 blocks (directly or inside "
        "spacy_elmo.ElmoTok2Vec.v1)."
    )

    # --- pretraining and CLI (spacy_elmo.training, spacy_elmo.cli) ----------
    E_PREFETCH_ORDER = (
        "StepPrefetcher.get was asked for step {step} while step {ahead} was prepared ahead: ask for the steps in "
        "order, from the first, or make a new StepPrefetcher starting at step {step}."
    )
    E_SAMPLE_WITHOUT_SAMPLER = (
        "BidirectionalLM was given a sample but no sampler (sampled softmax): the sampled loss corrects every "
        "logit by the sampler's expected counts. Pass the LogUniformSampler that drew the sample as sampler=, "
        "or sample=None for the full softmax."
    )
    E_TRAIN_PATH_MISSING = "{path} does not exist. Pass a UTF-8 text file or a directory of them."
    E_TRAIN_PATH_IS_OUTPUT = (
        "{path} holds a model or spacy-elmo's output (a pretrain OUTPUT_DIR, a native or AllenNLP model, embed's "
        "parts), no text: its config.json, vocab.txt and log would be read as corpus text. Pass the text file or "
        "the directory of text files you meant."
    )
    E_TRAIN_PATH_NOT_A_FILE = (
        "{path} is neither a file nor a directory (a pipe such as <(zcat ...), a FIFO or a device): the text is "
        "read more than once (its first bytes tell its compression), which a pipe cannot give. Write it to a file "
        "first; gzip, bzip2 and xz files are read as they are, decompressed while reading."
    )
    E_TRAIN_DIR_UNREADABLE = (
        "cannot read the directory {path} under {train_path} ({error}): its files would be left out of the corpus. "
        "Fix its permissions (e.g. chmod u+rx on it), move it out of {train_path}, or pass a subdirectory of "
        "{train_path} that holds the text as TRAIN_PATH (a file system's lost+found, which only root can read)."
    )
    E_TRAIN_PATH_UNREADABLE = (
        "cannot read the directory {path} ({error}): it is TRAIN_PATH, its files the corpus. Fix its permissions "
        "(e.g. chmod u+rx on it) or pass a directory you can read."
    )
    E_LINK_LOOP = (
        "{path} is a symbolic link past too many levels of symbolic links (a loop of links, or a chain longer than "
        "the system follows): it points to {target} (ls -l it and what it leads to). Point the link at {what} "
        "(ln -sfn TARGET {path}) or remove it."
    )
    E_BROKEN_LINK = (
        "{path} is a broken symbolic link: it points to {target}, which does not exist. Restore its target, "
        "point the link at {what} (ln -sfn TARGET {path}) or remove it."
    )
    #: E_BROKEN_LINK's and E_LINK_LOOP's ``what``, what the link should point at: a file (an options.json, a
    #: weight file, a model's config.json), a model directory (BiLM.load's), TRAIN_PATH, --options, a directory
    #: an output goes in (made by atomic.make_dirs: pretrain's OUTPUT_DIR, BiLM.save's, export's OUT_DIR)
    E_LINK_TO_FILE = "the file"
    E_LINK_TO_MODEL_DIR = "the model directory"
    E_LINK_TO_TEXT = "the text file or the directory of text files"
    E_LINK_TO_OPTIONS = "the options file or the model directory holding it"
    E_LINK_TO_OUTPUT_DIR = "the directory to write in"
    E_CACHE_DAMAGED = (
        "the corpus cache in {path} is damaged: {file} holds {found:,} {unit}, its meta.json says {expected:,} "
        "(a write cut short: a full disk, a crash). Delete {path} and run again to tokenize the text anew."
    )
    E_CACHE_TYPES_UNDECODABLE = (
        "the corpus cache in {path} is damaged: its types.txt is no UTF-8 ({error}; a write cut short: a full disk, "
        "a crash). Delete {path} and run again to tokenize the text anew."
    )
    E_EMPTY_CORPUS = (
        "No text to train on in {path}: {files}, 0 tokens. Pass UTF-8 text (one or more sentences per line)."
    )
    #: E_EMPTY_CORPUS's, E_NO_EVAL_TOKENS's and E_FIT_STATE_EMPTY_TEXT's ``files``
    E_FILES_READ = "{n_files} file(s) read, {n_binary} skipped as binary, UTF-16/32 or a format not read{hidden}"
    #: E_FILES_READ's ``hidden`` where hidden files or directories were skipped
    E_HIDDEN_SKIPPED = (
        ", {n_hidden} skipped as hidden (a file or directory whose name starts with \".\", such as .git or "
        ".DS_Store, is never read; to read one, rename it without the \".\")"
    )
    E_TOKENIZE_WORKER_DIED = (
        "{n} tokenizing worker process(es) ended before the corpus was tokenized (exit code {exitcode}; a "
        "negative code is the signal that ended it, -9 often the kernel's out-of-memory killer). Run again; "
        "with --tokenize-processes 1 the corpus is tokenized in this process."
    )
    E_TOKENIZE_WORKER_FAILED = (
        "A tokenizing worker process failed; its error:\n{error}Run again with --tokenize-processes 1 to see "
        "it in this process."
    )
    E_TOKENIZE_WORKER_BUILD = (
        "A tokenizing worker process could not build the pipeline this process reads the corpus with (language "
        "{lang!r}, tokenizer block {block}); its error:\n{error}A worker builds it afresh from that language and "
        "block: a tokenizer registered by code that only this process ran, or a package the worker cannot import, "
        "is not found there. Run again with --tokenize-processes 1: the corpus is then tokenized in this process, "
        "with the pipeline it built."
    )
    E_BINARY_FILE = (
        "{path} looks like a binary file (it contains NUL bytes), not UTF-8 text. Pass plain "
        "text (or gzip, bzip2 or xz of it){skipped}."
    )
    E_UNREAD_FORMAT = (
        "{path} holds {what}, which spacy-elmo does not read: it reads UTF-8 text, plain or compressed with gzip, "
        "bzip2 or xz (known by its first bytes, whatever the file's name). {fix}{skipped}."
    )
    #: E_UNREAD_FORMAT's and W_UNREAD_FORMAT_SKIPPED's ``what`` for a compression not read (zstd, lz4); the fixes
    #: (E_UNREAD_*_FIX) are E_UNREAD_FORMAT's, the warning's are W_UNREAD_*_FIX (into the corpus directory)
    E_UNREAD_COMPRESSION = "{format}-compressed data"
    E_UNREAD_COMPRESSION_FIX = (
        "Decompress it and pass the text (`{tool} -dc {shell_path} > {text}`), or compress it with gzip instead "
        "(`{tool} -dc {shell_path} | gzip > {gz}`)"
    )
    #: ``what`` for a zstd or lz4 file named as a tar archive (.tar.zst, .tar.lz4): decompressed, it is no text
    E_UNREAD_COMPRESSED_TAR = "a tar archive of files compressed with {format} (by its name)"
    E_UNREAD_COMPRESSED_TAR_FIX = (
        "If it holds text files, unpack it (`mkdir {dir} && {tool} -dc {shell_path} | tar -x -C {dir}`) and pass "
        "{dir}, the directory of its files"
    )
    #: ``what`` for an archive of files (zip, 7z, tar)
    E_UNREAD_ARCHIVE = "a {format} archive of files"
    E_UNREAD_ARCHIVE_FIX = "If it holds text files, unpack it (`{unpack}`) and pass NEW_DIR, the directory of its files"
    #: ``what`` for a document that is a zip archive of XML (.docx, .odt, .epub): unpacked, it is markup, not text
    E_UNREAD_DOCUMENT = "an {format} file ({endings}: a zip archive of XML and more, not its text)"
    E_UNREAD_DOCUMENT_FIX = (
        "Export its text as plain UTF-8 text (from the program that made it, or `pandoc -f {pandoc} {shell_path} -t "
        "plain -o {text}` for a .{pandoc}) and pass {text}"
    )
    E_WIDE_TEXT_FILE = (
        "{path} looks like {encoding} text, not UTF-8 (Notepad's \"Unicode\" and PowerShell's > write UTF-16). "
        "Re-encode it to UTF-8, e.g. `iconv -f {encoding} -t UTF-8 {shell_path} > NEW.txt`, and pass NEW.txt{skipped}."
    )
    #: E_BINARY_FILE's and E_WIDE_TEXT_FILE's ``skipped`` for the commands that read a directory of text files (not
    #: embed, which reads one file)
    E_NOT_TEXT_SKIPPED = "; in a directory that pretrain, evaluate and fit-state read, such files are skipped with a warning"
    E_NOT_COMPRESSED = (
        "{path} is named {suffix} but is not {format} data (its first bytes are no gzip, bzip2 or xz "
        "header). Compress it with {format}, or rename it to what it is (a plain text file is read as it is)."
    )
    E_OTHER_COMPRESSION = (
        "{path} is named {suffix} but holds {found} data, not {format}. Rename it to end in {ending}, or "
        "recompress it with {format}."
    )
    E_ARCHIVE_BAD = (
        "{path} is a broken {format} file: {problem}. Nothing was trained on or written from it; fetch or "
        "compress it again (in a directory, one broken file stops the run rather than silently reading less "
        "text: fix or remove it)."
    )
    E_ARCHIVE_TRUNCATED = "it ends before the end of its compressed data (an interrupted download or copy?)"
    E_ARCHIVE_EMPTY = "it is empty, 0 bytes (an interrupted download or copy?)"
    E_ARCHIVE_DAMAGED = "its compressed data is damaged ({error})"
    E_CORPUS_TOO_SMALL = (
        "The corpus has {n_tokens} tokens (with sentence markers), too few for {n_rows} rows "
        "(batch size {batch_size} x {world} process(es)) of {unroll} + 1 tokens. Use a smaller "
        "--batch-size or --unroll, or more text."
    )
    E_TOO_FEW_SENTENCES = (
        "--sentences: the corpus gives {rows}, too few for {processes}: its batches of {batch_size} (the last one "
        "may be short) must give each process one, which takes at least {needed}. Use {fix}."
    )
    #: E_TOO_FEW_SENTENCES's ``fix``: each way on that applies (a smaller batch where one would do, fewer processes
    #: where there are several), then more text
    E_TOO_FEW_SENTENCES_BATCH = "--batch-size {most} or smaller"
    E_TOO_FEW_SENTENCES_WORLD = "fewer processes"
    E_TOO_FEW_SENTENCES_TEXT = "more text"
    E_SPACY_LANG = (
        "Could not create a spaCy tokenizer for --lang {lang!r}: {error}. Use an ISO code that "
        "spaCy supports (en, de, ko, ...); some languages need extra packages."
    )
    E_MODEL_LANG = (
        "The model's config.json records language {lang!r} (provenance lang: the language pretrain read its text "
        "with), and the text is read with it as no --lang was given, but this spaCy cannot build it: {error}. Install "
        "the spaCy (or the package of that language) the model was pretrained with, or read the text otherwise: "
        "--lang LANG names a language this spaCy has (embed also takes --whitespace, which splits the lines at "
        "whitespace)."
    )
    E_TOKENIZER_CONFIG_MISSING = (
        "--tokenizer {path} does not exist. Give the path of a spaCy config file (.cfg) with an [nlp.tokenizer] "
        "block, e.g. these lines:\n[nlp.tokenizer]\n@tokenizers = \"spacy.zh.ChineseTokenizer\"\n"
        "segmenter = \"jieba\""
    )
    E_TOKENIZER_CONFIG_UNREADABLE = (
        "--tokenizer {path} could not be read as a spaCy config file: {error}. Give a spaCy config (.cfg: "
        "[section] headers and key = value lines, as spacy init config writes) holding an [nlp.tokenizer] block."
    )
    #: E_TOKENIZER_CONFIG_UNREADABLE's ``error`` where a section comes before its parent (spaCy's reader: KeyError)
    E_TOKENIZER_CONFIG_PARENT_BELOW = (
        "a section under [{parent}] (e.g. [nlp.tokenizer] under [nlp]) comes before the section it belongs to, which "
        "spaCy's reader refuses: put each section below the one it belongs to ([nlp] above [nlp.tokenizer])"
    )
    E_TOKENIZER_CONFIG_NO_BLOCK = (
        "--tokenizer {path} has no [nlp.tokenizer] section (its sections: {sections}). Add one naming spaCy's "
        "tokenizer function and its settings, e.g. these lines:\n[nlp.tokenizer]\n"
        "@tokenizers = \"spacy.zh.ChineseTokenizer\"\nsegmenter = \"jieba\""
    )
    E_TOKENIZER_CONFIG_LANG = (
        "--tokenizer {path} is a config of language {config_lang!r} ([nlp] lang), but the text is read as --lang "
        "{lang!r}: its tokenizer block was written for another language. Pass --lang {config_lang}, or a config "
        "whose [nlp] lang is {lang!r} (or that sets none)."
    )
    E_TOKENIZER_BLOCK_SHAPE = (
        "The [nlp.tokenizer] block {block} ({source}) is not one registered tokenizer function with plain "
        "settings: it must name one @tokenizers function and hold no nested block (no other @ key, no "
        "[nlp.tokenizer.*] section of a registered function), since the model records it and every command that "
        "reads text for the model builds it again from that record, which it does only for such a block. Use "
        "one @tokenizers function whose settings are plain values."
    )
    E_TOKENIZER_BLOCK_PACKAGE = (
        "The [nlp.tokenizer] block {block} ({source}) cannot be built for --lang {lang}: a package it needs is "
        "missing ({error}). Install it (segmenter = \"jieba\": pip install jieba; spacy.ja.JapaneseTokenizer: "
        "pip install sudachipy sudachidict_core; ...) or choose a block that builds here: a block given is read "
        "with as it is, never replaced by spaCy's rule-based tokenizer."
    )
    E_TOKENIZER_BLOCK_BUILD = (
        "The [nlp.tokenizer] block {block} ({source}) cannot be built for --lang {lang}: {error}. Fix the block: "
        "a @tokenizers function this spaCy knows (spacy.Tokenizer.v1, spacy.zh.ChineseTokenizer, ...: "
        "https://spacy.io/api/top-level#registry) with the settings it takes."
    )
    E_TOKENIZER_BLOCK_CANNOT_READ = (
        "The [nlp.tokenizer] block {block} ({source}) builds for --lang {lang} but cannot read a word: {error}. A "
        "tokenizer that needs an initialize step to load its model first (spacy.zh.ChineseTokenizer's segmenter = "
        "\"pkuseg\") cannot be used: the model records only the block, and every command that reads text for it "
        "builds it again from that alone. Use a block that reads once built (for Chinese words segmenter = \"jieba\", "
        "pip install jieba; for characters segmenter = \"char\")."
    )
    #: E_TOKENIZER_BLOCK_*'s ``source`` where pretrain's --tokenizer gave the block
    E_TOKENIZER_SOURCE_FILE = "the [nlp.tokenizer] block of --tokenizer {path}"
    #: and where the Python API's TrainConfig.tokenizer did
    E_TOKENIZER_SOURCE_CONFIG = "TrainConfig.tokenizer"
    #: and where a tokenizing worker builds the block of the pipeline its parent reads the corpus with
    E_TOKENIZER_SOURCE_WORKER = "the block of the pipeline the process that started this worker reads with"
    E_UNKNOWN_LANG = (
        "spaCy could not load language {lang!r} ({error}): use a language code spaCy supports (en, de, ko, "
        "ja, xx for multi-language, ...: https://spacy.io/usage/models#languages)."
    )
    E_OPTIONS_MISSING = "The model options file {path} does not exist: pass the path of an options.json."
    E_OPTIONS_FILE = (
        "Could not read the model options {path}: {error}. Pass an AllenNLP options.json, a spacy-elmo model's "
        "config.json (or its directory) or a JSON object of BiLMConfig fields (e.g. {{\"projection_dim\": 16, "
        "\"cell_dim\": 32}})."
    )
    # a value BiLMConfig refuses in a JSON object of BiLMConfig fields ({key}: the field) or in a spacy-elmo model's
    # config.json ({key}: config.FIELD): the file was read, and is the kind --options takes (not E_OPTIONS_FILE's advice)
    E_OPTIONS_FILE_BAD_VALUE = "The model options {path} have an invalid {key}: {error} Fix {key} there."
    #: E_OPTIONS_FILE_BAD_VALUE where the sizes of several keys make too large a model together: any may shrink
    E_OPTIONS_FILE_BAD_VALUES = (
        "The model options {path} have sizes too large together, {keys}: {error} One alone may not be enough: "
        "shrink them there."
    )
    #: E_OPTIONS_FILE_BAD_VALUE where the sizes of several keys each make too large a model alone: each must shrink
    E_OPTIONS_FILE_BAD_VALUES_EACH = (
        "The model options {path} have sizes each too large alone, {keys}: {error} Fix each of them there."
    )
    #: read_json_file's ``not_object`` where the caller words the error around it (``{error}``): --options (an
    #: array's items were read as keys, a string's characters), embed's parts manifest, a DDP rank's meta.json
    E_JSON_NOT_OBJECT = "it holds a JSON {kind}, not an object"
    E_OPTIONS_UNKNOWN_FIELD = (
        "The model options {path} have key(s) {names}, which are no model options: --options reads an AllenNLP "
        "options.json (one with an 'lstm' section), a spacy-elmo model's config.json (\"format\": "
        "\"spacy-elmo/bilm\") or a JSON object of these keys alone: {choices}. Remove or rename them, or pass the "
        "options.json that came with an AllenNLP model."
    )
    E_PRETRAIN_OPTIONS_IS_HDF5 = (
        "{path} is an HDF5 file (ELMo weights), not model options: --options takes the options JSON (the "
        "options.json that came with the weight file, a spacy-elmo model's config.json or its directory, or a JSON "
        "object of BiLMConfig fields). To fine-tune those weights instead, pass their directory as --init."
    )
    E_OPTIONS_DIR = (
        "{path} is a directory holding neither a spacy-elmo {config} nor one AllenNLP *options*.json ({n_options} "
        "found{names}{dirs}), where the model's sizes are read from: pass a spacy-elmo model directory (pretrain's "
        "OUTPUT_DIR, BiLM.save's), a directory of AllenNLP files (one options.json), or the options file itself."
    )
    E_PRESET_AND_OPTIONS = "Pass either --preset or --options, not both."
    E_STEPS_AND_EPOCHS = "Pass either --max-steps or --epochs, not both."
    # A command-line option's value out of bounds (typer names the option before it).
    E_BAD_OPTION_VALUE = "must be {what}; found {value!r}."
    E_BAD_TRAIN_VALUE = "{name} " + E_BAD_OPTION_VALUE
    E_UNKNOWN_OPTIMIZER = "Unknown optimizer {name!r}: use 'adagrad' or 'adam'."
    E_NO_CHECKPOINT = (
        "--resume was given but {path} holds no checkpoint. Start without --resume (or point "
        "OUTPUT_DIR at the directory of the interrupted run)."
    )
    E_CHECKPOINT_MISMATCH = (
        "The checkpoint in {path} was written with {found}, but this run uses {expected}. "
        "--resume continues a run exactly: pass the settings it was started with. To train on "
        "with other settings, start a new OUTPUT_DIR with --init {shell_path}."
    )
    E_RESUME_WORLD = (
        "The checkpoint in {path} was written by {found} ({how}), this run has {expected}: each process draws its "
        "own batches, so --resume continues exactly only with as many. {rerun}, or train on in a new OUTPUT_DIR with "
        "--init {shell_path}."
    )
    #: E_RESUME_WORLD's ``how`` and ``rerun`` for a checkpoint of several processes, and of one
    E_RESUME_WORLD_HOW = "torchrun: --nnodes x --nproc-per-node = {found}"
    E_RESUME_WORLD_RERUN = "Rerun with the same torchrun sizes"
    E_RESUME_WORLD_HOW_ONE = "one process: no torchrun, or torchrun with one"
    E_RESUME_WORLD_RERUN_ONE = "Rerun as one process (without torchrun)"
    #: E_CHECKPOINT_MISMATCH's ``found``/``expected`` of a run without --tokenizer
    E_RESUME_TOKENIZER_DEFAULT = "no --tokenizer (spaCy's tokenizer of --lang)"
    #: and of one with it: the [nlp.tokenizer] block its file gave
    E_RESUME_TOKENIZER_BLOCK = "--tokenizer of the [nlp.tokenizer] block {block}"
    E_CHECKPOINT_DATA = (
        "The checkpoint in {path} was trained on other data: the tokenized corpus or its vocabulary "
        "(TRAIN_PATH, --lang and its tokenizer; for a checkpoint that did not record them, also --init and --new-vocab) "
        "differs from this run's, so resuming would read other batches and give words other softmax rows. Resume "
        "with the same corpus and settings; to continue on new text, start a new OUTPUT_DIR with --init {shell_path}."
    )
    E_RESUME_VOCAB_SIZE = (
        "The checkpoint in {path} has a vocabulary of {found:,} entries, but this run's has {expected:,}: "
        "--vocab-size and --min-count cut it from the corpus, so resuming would give words other softmax rows. "
        "Resume with the --vocab-size and --min-count the run was started with (the first line of its "
        "train_log.jsonl records them); to train on with other ones, start a new OUTPUT_DIR with --init {shell_path}."
    )
    E_RESUME_INIT_MISSING = (
        "The run in {path} fine-tunes {init} ({started}), but this --resume leaves --init out: {why}. Resume "
        "with {resume_with} (and the other settings the run was started with)."
    )
    E_RESUME_STARTED = "it was started with --init {shell_init}"
    E_RESUME_STARTED_NEW_VOCAB = "it was started with --init {shell_init} --new-vocab"
    E_RESUME_STARTED_NO_SOFTMAX = (
        "it was started from --init {shell_init}, which has no softmax, so a new vocabulary was built from its corpus"
    )
    E_RESUME_STARTED_NEW_VOCAB_UNKNOWN = (
        "it was started from --init {shell_init} with a vocabulary built from its corpus, by --new-vocab or because "
        "{init} has no softmax; {init} cannot be read now to tell which"
    )
    E_RESUME_INIT_MISSING_VOCAB = "its vocabulary would come from the corpus, not from {init}'s softmax rows"
    E_RESUME_INIT_MISSING_RECORD = (
        "its vocabulary would come from the corpus as before, but the models it saves would no longer record "
        "that they started from {init}"
    )
    E_RESUME_NEW_VOCAB_MISSING = (
        "The run in {path} fine-tunes {init} with a vocabulary built from its corpus ({started}), but this "
        "--resume leaves --new-vocab out: its vocabulary would be {init}'s, and words would get other softmax "
        "rows. Resume with {resume_with} (and the other settings the run was started with)."
    )
    E_RESUME_NEW_VOCAB_ADDED = (
        "The run in {path} fine-tunes {init} keeping its vocabulary ({started}, without --new-vocab), but "
        "this --resume adds --new-vocab: its vocabulary would be built from the corpus, and words would get "
        "other softmax rows. Resume without --new-vocab; to fine-tune {init} with this corpus's vocabulary, "
        "start a new OUTPUT_DIR with --init {shell_init} --new-vocab."
    )
    E_RESUME_INIT_ADDED = (
        "The run in {path} was trained from scratch (started without --init), but this --resume adds "
        "--init {shell_init}: its vocabulary would come from {init}, not from the corpus. Resume without --init; "
        "to fine-tune {init}, start a new OUTPUT_DIR with --init {shell_init}."
    )
    E_RESUME_OTHER_INIT = (
        "The run in {path} fine-tunes {found} (it was started with --init {shell_found}), but this --resume names "
        "--init {shell_expected}, another model. Resume with --init {shell_found}; to fine-tune {expected}, start "
        "a new OUTPUT_DIR with --init {shell_expected}."
    )
    E_RESUME_INIT_CHANGED = (
        "The run in {path} fine-tunes --init {init} and kept its vocabulary, but the model at {init} has "
        "changed since the run started from it: {difference}, so the checkpoint's softmax rows would be read as "
        "other words. Restore the model the run started from at {init}, or start a new OUTPUT_DIR to fine-tune the "
        "model there now."
    )
    #: E_RESUME_INIT_CHANGED's ``difference`` where the vocabulary's size changed
    E_INIT_VOCAB_SIZES = "its vocabulary is another ({found:,} words when the run started, {expected:,} now)"
    #: and where it did not (or a checkpoint did not record it): its words differ
    E_INIT_VOCAB_WORDS = "its vocabulary holds other words than when the run started"
    E_CHECKPOINT_TOKENIZER = (
        "The checkpoint in {path} was trained on other tokens of the same text: its corpus was read with "
        "{found}, this run reads it with {expected}, and the tokens differ, so resuming would read other "
        "batches. spaCy's tokenizer of --lang changes when a package it needs is installed or removed (ja: "
        "SudachiPy, ko: mecab-ko), the token rules with the spacy-elmo version (TOKEN_RULES in "
        "spacy_elmo/training/data.py), spaCy's rules (a digest of its tokenizer exceptions, prefix/suffix/infix "
        "patterns and sentencizer punctuation) with the spaCy version. Resume where the earlier tokenizer and "
        "spaCy are installed, or go on with these tokens in a new OUTPUT_DIR with --init {shell_path}."
    )
    E_CHECKPOINT_TOKENIZER_UNRECORDED = "a tokenizer not recorded (a spacy-elmo before token rules 2)"
    E_CHECKPOINT_TOKENIZATION = "tokenizer {tokenizer}, token rules {rules}, spaCy rules {spacy_rules}"
    E_CHECKPOINT_SPACY_RULES_UNRECORDED = "not recorded (a spacy-elmo before they were)"
    E_RESUME_MODEL = (
        "The checkpoint in {path} holds the model {found}, but --preset/--options ask for {expected}. "
        "Resume without --preset/--options (the checkpoint's model is used), or start a new OUTPUT_DIR."
    )
    E_BAD_CHECKPOINT = (
        "{path} is damaged or not a spacy-elmo checkpoint ({error}). Checkpoints are written "
        "atomically, so a killed run does not leave one like this: restore the file, or start "
        "again without --resume in a new OUTPUT_DIR."
    )
    E_NO_VOCAB_WORDS = (
        "No word of the corpus occurs --min-count {min_count} times (the most frequent occurs {most} "
        "times), so the vocabulary would hold only <S>, </S> and <UNK>. Lower --min-count, or use more text."
    )
    E_INIT_AND_MODEL = (
        "--init fine-tunes an existing model, whose sizes are fixed: drop --preset/--options."
    )
    E_UNROLL_WITH_SENTENCES = (
        "--unroll {value} has no effect with --sentences: every row is one whole sentence read from the start "
        "state (longer ones cut into pieces of --max-length targets), not a window of a stream. Drop --unroll, "
        "or drop --sentences to train on bilm-tf's streams in --unroll windows."
    )
    E_MAX_LENGTH_WITHOUT_SENTENCES = (
        "--max-length {value} only applies with --sentences; streams (the default reading) are read in "
        "--unroll windows with carried states. Add --sentences, or drop --max-length."
    )
    E_LENGTH_POOL_WITHOUT_SENTENCES = (
        "--length-pool {value} only applies with --sentences (how sentences are batched: 1 at random, more sorted by length within pools of that many batches); streams "
        "(the default reading) are read in --unroll windows of one length. Add --sentences, or drop --length-pool."
    )
    E_STATE_SENTENCES_WITH_SENTENCES = (
        "--state-sentences {value} fits a start state for a stream-trained model, but with --sentences the "
        "model learns to read every sentence from the zero state, and its held-out perplexity is measured from "
        "there: the fitted state would replace the start it was trained for. Drop --state-sentences (to try "
        "a fitted state anyway, run `spacy-elmo fit-state` on the trained model), or drop --sentences."
    )
    E_NEW_VOCAB_WITHOUT_INIT = (
        "--new-vocab only applies with --init (a new run always builds its vocabulary from the corpus)."
    )
    E_OUTPUT_NOT_A_DIR = (
        "OUTPUT_DIR {path} is a file; pretrain writes a directory (model, vocab.txt, checkpoint, log, the "
        "tokenized corpus). Choose another OUTPUT_DIR."
    )
    E_CACHE_DIR_NOT_OURS = (
        "{path} is not a corpus cache of spacy-elmo: {found}. pretrain keeps the tokenized corpus in OUTPUT_DIR/data, "
        "rewrites its files, and replaces the whole directory when a --resume reads the text again, which would "
        "delete what is there. Choose an OUTPUT_DIR without a data entry of yours (a new directory, say)."
    )
    E_CACHE_DIR_IS_FILE = "it is a file"
    E_CACHE_DIR_HOLDS = "it holds {n} of another kind ({names})"
    E_OUTPUT_INSIDE_TRAIN_PATH = (
        "OUTPUT_DIR {path} is inside TRAIN_PATH {train_path} (maybe through a linked directory, which is followed), "
        "every non-hidden file of which is read as text: the "
        "run would read its own files (the tokenized corpus, vocabulary, log) as corpus, other ones on every run "
        "(a --resume is then refused as other data). Choose an OUTPUT_DIR outside TRAIN_PATH (or a hidden "
        "directory in it, .name, which is not read)."
    )
    E_OUTPUT_NOT_EMPTY = (
        "{path} already holds a training run (checkpoint or model). Pass --resume to continue "
        "it, or choose a new OUTPUT_DIR."
    )
    #: E_OUTPUT_NOT_EMPTY in a job that torchrun restarted (--max-restarts)
    E_OUTPUT_NOT_EMPTY_RESTARTED = (
        "{path} already holds a training run (checkpoint or model), and torchrun restarted this job (restart "
        "{attempt}, --max-restarts): a restart runs the same command again, which cannot carry a run on. If this "
        "job's earlier attempt wrote it, stop the job, then rerun the command with --resume and without "
        "--max-restarts; if not, choose a new OUTPUT_DIR."
    )
    E_OUTPUT_IN_USE = (
        "{path} is in use by another pretrain run (or a fit-state of the model in it, or an export into it), still "
        "running (it holds the directory's lock): two runs in one OUTPUT_DIR would mix their tokenized corpus, checkpoints and log. Wait "
        "for it to end, or stop it (Ctrl-C) and rerun with --resume, or choose another OUTPUT_DIR."
    )
    E_OUTPUT_HOLDS_ALLENNLP = (
        "{path} holds AllenNLP weights ({options}, {weights}): the model pretrain writes there (config.json, "
        "model.safetensors, vocab.txt) would stand beside them, replacing their vocab.txt, and the directory "
        "would load as neither model. Choose a new OUTPUT_DIR (to fine-tune these weights: --init {shell_path})."
    )
    E_TRAINING_DIVERGED = (
        "Training diverged at step {step}: {what} is {value} (not a finite number), so the weights are no longer "
        "usable, and they were not saved{kept}. Pretrain again with a lower --lr (or --clip){restart}."
    )
    E_TRAINING_DIVERGED_KEPT = " ({path} keeps its checkpoint and model of step {last})"
    E_TRAINING_DIVERGED_RESTART = (
        ": --resume must keep the settings, so go on from that model in a new OUTPUT_DIR with --init {shell_path}, "
        "or start over"
    )
    E_PRETRAIN_NO_SPACE = (
        "The run stopped: writing its files ran out of space ({error}). OUTPUT_DIR {path} holds the tokenized corpus "
        "(4 bytes a token, twice that while it is built), the checkpoint (weights and optimizer state, each new one "
        "written beside the last before replacing it), the model and the log. Free space on its disk (or choose an "
        "OUTPUT_DIR on a larger one), then {on}"
    )
    E_PRETRAIN_NO_SPACE_RESUME = (
        "rerun the same command with --resume: the last checkpoint is whole (written atomically) and continues exactly."
    )
    E_PRETRAIN_NO_SPACE_RERUN = "rerun the same command (no checkpoint was written yet; half-written files are replaced)."
    E_PRETRAIN_INTERRUPTED = (
        "Interrupted. The last checkpoint in {path} (written every --checkpoint-every steps and atomically, so "
        "it is whole) continues exactly: rerun the same command with --resume."
    )
    E_PRETRAIN_INTERRUPTED_EARLY = (
        "Interrupted before the first checkpoint: {path} holds no checkpoint yet, so there is nothing to "
        "resume. Rerun the same command without --resume (a finished tokenization in {path}/data is reused)."
    )
    E_NO_SOFTMAX = (
        "{path} has no softmax (the tensors 'softmax.weight' / 'softmax.bias' in model.safetensors, or "
        "softmax.safetensors beside AllenNLP weights), and a perplexity needs one: it is the layer that predicts "
        "the next word over vocab.txt. Models written by `spacy-elmo pretrain` have both; other weights "
        "(BiLM.save, the released AllenNLP files) get them by fine-tuning first: `spacy-elmo pretrain TEXT "
        "NEW_DIR --init {shell_path}` (`pretrain --init`), then evaluate NEW_DIR."
    )
    E_EVALUATE_PIPELINE = (
        "{given}, and a perplexity needs a model with a softmax (the "
        "layer that predicts the next word over vocab.txt), which a pipeline's biLM has not: `spacy-elmo export "
        "{shell_pipeline} ELMO_DIR --format native` writes its biLM without one. Evaluate the model written by "
        "`spacy-elmo pretrain` that the pipeline was built with (its training's --paths.elmo), or fit a softmax "
        "to the exported biLM first: `spacy-elmo pretrain TEXT NEW_DIR --init ELMO_DIR`, then evaluate NEW_DIR "
        "(that trains the biLM further too)."
    )
    E_VOCAB_MISSING = (
        "{path} has no vocab.txt, which its softmax needs (row i of the softmax is line i of vocab.txt). "
        "Restore vocab.txt from where the model was written (pretrain and export put it beside the weights), "
        "or copy the whole model directory again."
    )
    E_VOCAB_SIZE_MISMATCH = (
        "vocab.txt in {path} has {n_vocab} entries but the softmax has {n_softmax} rows; the "
        "files do not belong together."
    )
    E_BAD_VOCAB = (
        "vocab.txt in {path} must start with <S>, </S>, <UNK> (one token per line); found "
        "{found!r}."
    )
    E_VOCAB_NOT_UTF8 = (
        "vocab.txt in {path} is not UTF-8 (line {line}: {error}). vocab.txt holds one token per line in UTF-8, "
        "as pretrain and bilm-tf write it: convert the file (e.g. iconv -t UTF-8) or restore it from the model's source."
    )
    E_VOCAB_DUPLICATE = (
        "vocab.txt in {path} lists {token!r} twice (lines {first} and {second}), so its softmax rows cannot be told "
        "apart. Row i of the softmax is line i of vocab.txt: restore the vocab.txt written with these weights."
    )
    E_SOFTMAX_INCOMPLETE = (
        "{path} has {found!r} but not {missing!r}: a softmax needs both 'softmax.weight' (V, P) and "
        "'softmax.bias' (V,). The file is incomplete: copy the model directory again from its source."
    )
    E_SOFTMAX_SHAPE = (
        "The softmax in {path} has weight {weight} and bias {bias}, but this biLM (projection_dim {P}) needs "
        "weight (V, {P}) and bias (V,). The softmax belongs to another model: restore the files written together."
    )
    E_UNKNOWN_CONFIG = "No shipped training config named {name!r}; the configs are: {names}."
    E_CONFIG_EXISTS = "{path} exists. Pass --overwrite to replace it, or another OUTPUT (- writes to stdout)."
    E_CONFIG_IS_DIR = (
        "{path} is a directory, but the config is one file (--overwrite replaces a file, not a directory). "
        "Give a file path such as {example}, or - for stdout."
    )
    E_CONFIG_WRITE = "Could not write {path}: {error}. Choose a writable OUTPUT, or - for stdout."
    E_INTERRUPTED = (
        "Interrupted: `spacy-elmo {command}` stopped before it finished. Rerun the same command for its result"
        "{rerun}."
    )
    #: E_INTERRUPTED's ``rerun`` (else ""): an export without --overwrite stopped once OUT_DIR held files, which a
    #: rerun without it refuses (E_EXPORT_NOT_EMPTY)
    E_INTERRUPTED_OVERWRITE = (
        ", adding --overwrite: {path} holds what the stopped export moved into it (part of the model, or all of "
        "it), and a second export replaces an OUT_DIR that is not empty only with --overwrite"
    )
    E_INTERRUPTED_STARTING = "Interrupted while spacy-elmo was starting: nothing was done. Rerun the command."
    E_STDOUT_CLOSED = (
        "Could not write the output to stdout: it is closed (as `>&-` leaves it). Redirect it instead, to a file "
        "or to /dev/null (config can also write the file itself: name it as OUTPUT)."
    )
    E_STDOUT = (
        "Could not write the output to stdout: {error}. Redirect stdout to a file on a disk with free space "
        "(config can also write the file itself: name it as OUTPUT)."
    )
    E_EXPORT_FORMAT = "Unknown export format {name!r}: use 'allennlp' or 'native'."
    E_EXPORT_WRITE = "Could not write the model to {path}: {error}. Check the path, its permissions and the room on its disk (nothing was left there: OUT_DIR is as it was)."
    E_EXPORT_COMPONENT_NOT_PIPELINE = (
        "--component {component} names a component of a saved spaCy pipeline, but {path} is a model directory, "
        "not a pipeline: leave --component out to export it."
    )
    E_EXPORT_NOT_A_DIR = "{path} is a file; export writes a directory. Choose another OUT_DIR."
    E_EXPORT_IN_USE = (
        "{path} is in use: another process holds the directory's lock, a pretrain run (or a fit-state or export "
        "there). --overwrite would delete what it is writing (a pretrain's checkpoint, log and tokenized corpus). "
        "Wait for it to end, or choose another OUT_DIR."
    )
    E_EXPORT_ONTO_RUN = (
        "{path} is both MODEL_DIR and OUT_DIR, and holds a pretrain run's checkpoint ({checkpoint}): --overwrite "
        "would replace the whole directory with the exported model, deleting the checkpoint, train_log.jsonl and "
        "data/ that `spacy-elmo pretrain --resume` continues from. Export elsewhere: choose another OUT_DIR."
    )
    E_EXPORT_BUNDLED = (
        "{path} is (or lies inside) the bundled default model's directory in the installed package ({bundled}): "
        "writing there would change nlp.add_pipe(\"elmo\") and BiLM.load(\"default\") for every user of this "
        "environment. Choose another OUT_DIR and use it as the model (--paths.elmo OUT_DIR, BiLM.load(OUT_DIR))."
    )
    E_EXPORT_NOT_EMPTY = (
        "{path} is not empty: its files would mix with the exported model's. Choose a new OUT_DIR, "
        "or pass --overwrite to replace {path} and everything in it."
    )
    E_DEVICE_UNAVAILABLE = "--device {device} was requested but {reason}. Use --device cpu."
    E_UNKNOWN_DEVICE = "Unknown --device {device!r}: use cpu, cuda, cuda:N (a GPU index) or mps."
    E_NO_SUCH_GPU = (
        "--device {device} was requested but {n_gpus} CUDA device(s) are visible: use an index from 0 to "
        "{last}, or --device cuda (the current one)."
    )
    E_TORCHRUN_ENV = (
        "The environment variable {name}={value!r} is not one torchrun sets: it must be a whole number from "
        "{lowest} to {highest} (torchrun gives every process it starts WORLD_SIZE, the number of processes, "
        "and its RANK and LOCAL_RANK below it). Launch with torchrun, or unset WORLD_SIZE, RANK and LOCAL_RANK "
        "to run one process."
    )
    E_CACHE_NOT_SHARED = (
        "Rank {rank} of this torchrun job cannot read the corpus that rank 0 tokenized into OUTPUT_DIR {path} ({error}): "
        "every machine of the job must reach OUTPUT_DIR, and --init, --options and --tokenizer where given, at the same "
        "path (a shared file system; TRAIN_PATH and --heldout are read by rank 0 alone), and each rank's user must be "
        "allowed to read them (rank 0's user wrote OUTPUT_DIR). Give an absolute OUTPUT_DIR on a file system every "
        "machine mounts{readable}."
    )
    #: E_CACHE_NOT_SHARED's ``readable`` where this rank may not read the cache (a PermissionError)
    E_CACHE_NOT_SHARED_READABLE = ", or make it readable by every rank's user"
    E_PEER_DIED = (
        "{error}\nAnother process of this torchrun job died or stopped answering mid-run (killed: the OOM killer? see "
        "its machine's `dmesg`; an error of its own, if it had one, is on its output in the job's log, prefixed with "
        "its rank unless it is rank 0), so this one stopped too{saved}. Once its cause is fixed, {on}"
    )
    #: An error said by a rank other than 0 of a torchrun job (torchrun merges every rank's output)
    E_SAID_BY_RANK = "Rank {rank} of this torchrun job: {message}"
    #: E_PEER_DIED where the rank that failed recorded it in torchrun's store (an error of its own, which it says)
    E_PEER_FAILED_MID_RUN = (
        "Rank {rank} of this torchrun job failed mid-run, so this process stopped too{saved}: that rank's error, on its "
        "output (its terminal, or the job's log for rank {rank}), says why. Once its cause is fixed, {on}"
    )
    E_PEER_DIED_CHECKPOINT = ", after the checkpoint of step {step:,} in {path}"
    E_PEER_DIED_CHECKPOINT_IN = ", after the last checkpoint in {path}"
    E_PEER_FAILED = (
        "Rank {rank} of this torchrun job failed or refused the run, and this process stopped with it: that "
        "rank's message says why and what to do."
    )
    E_DDP_DEVICE = (
        "This process has rank {rank} of {world} and LOCAL_RANK {local}; DDP on CUDA needs a GPU per process (GPU "
        "LOCAL_RANK of those visible, or the only one visible) but {visible} visible (CUDA_VISIBLE_DEVICES="
        "{cuda_visible}). Start at most one process per GPU on each machine (torchrun --nproc-per-node), or give "
        "each process one GPU of its own (CUDA_VISIBLE_DEVICES per process, Slurm's --gpus-per-task=1); a launcher "
        "that sets no LOCAL_RANK (it then defaults to RANK) must set it on a job that spans machines."
    )
    E_DDP_SAME_GPU = (
        "Ranks {ranks} of this torchrun job of {world} processes train on the same GPU ({uuid} on machine {host}, "
        "CUDA_VISIBLE_DEVICES={cuda_visible}), which DDP on CUDA refuses (NCCL: \"Duplicate GPU detected\"): each "
        "process needs a GPU of its own. Start at most as many processes on each machine as it has GPUs (torchrun "
        "--nproc-per-node), or give each process one GPU of its own (a CUDA_VISIBLE_DEVICES per process, Slurm's "
        "--gpus-per-task=1)."
    )
    E_NO_EVAL_TOKENS = (
        "{path} contains no tokens to evaluate on ({files}). Pass "
        "UTF-8 text with at least one word: a text file (plain, .gz, .bz2 or .xz) or a directory holding such files."
    )
    E_NO_EVAL_WORDS = (
        "There are no tokens to evaluate on: no sentence holds a word. Pass at least one non-empty sentence "
        "(a list of token strings)."
    )
    E_FIT_STATE_NO_TEXT = "Pass TEXT_PATH (the text to fit the initial state on), or --clear to remove the state."
    E_FIT_STATE_CLEAR_AND_TEXT = (
        "--clear removes the fitted state and reads no text, but TEXT_PATH {path} was given too: drop TEXT_PATH "
        "to clear the state, or drop --clear to fit a new state on the text."
    )
    E_FIT_STATE_EMPTY_TEXT = (
        "{path} holds no text to fit the initial state on ({files}, 0 sentences). Pass UTF-8 running text like the training text (one or more sentences per line)."
    )
    E_FIT_STATE_ALLENNLP = (
        "{path} holds AllenNLP/bilm-tf weights, whose format has no place for a fitted initial state. Convert "
        "the model first: `spacy-elmo export {shell_path} NEW_DIR --format native`, then `spacy-elmo fit-state "
        "NEW_DIR TEXT_PATH`."
    )
    E_FIT_STATE_BUNDLED = (
        "{model} is the bundled default model inside the installed package ({path}): fitting a state there would "
        "change nlp.add_pipe(\"elmo\") and BiLM.load(\"default\") for every user of this environment. Copy it "
        "first: `spacy-elmo export default NEW_DIR --format native`, then `spacy-elmo fit-state NEW_DIR TEXT_PATH` "
        "and use NEW_DIR as the model."
    )
    E_FIT_STATE_MAX_SENTENCES = (
        "--max-sentences {max_sentences} is fewer than the {needed} sentences --rows {rows} needs ({rows} streams of "
        "more than {warmup} warm-up sentences each), whatever the text: raise --max-sentences to {needed} or more"
        "{or_rows}."
    )
    E_FIT_STATE_OR_FEWER_ROWS = ", or lower --rows to {max_rows} or fewer"
    E_FIT_STATE_TEXT_TOO_SHORT = (
        "{path} holds {n} non-empty sentence(s), fewer than the {needed} --rows {rows} needs ({streams} of "
        "more than {warmup} warm-up sentences each): give it more running text{or_rows}."
    )
    E_FIT_STATE_IN_USE = (
        "{path} is in use: another process holds the directory's lock, a pretrain run (it rewrites the model there "
        "at every checkpoint, over the state fit-state would write) or an export or a second fit-state there. Wait "
        "for it to end and run fit-state then, or fit the state of a copy: `spacy-elmo export {shell_path} NEW_DIR "
        "--format native`, then `spacy-elmo fit-state NEW_DIR TEXT_PATH`."
    )
    E_FIT_STATE_WRITE = (
        "Could not write the initial state into {path}: {error}. The model directory must be writable: copy "
        "the model elsewhere (`spacy-elmo export {shell_path} NEW_DIR --format native`) and fit the state there. "
        "The model's files are unchanged."
    )
    E_NOT_POSITIVE_OPTION = "must be a positive integer (1 or more); found {value}."
    E_NEGATIVE_OPTION = "must be an integer of 0 or more; found {value}."

    # --- AllenNLP migration layer (spacy_elmo.allennlp_compat) -----------------
    E_COMPAT_NO_MODEL = (
        "{cls} needs a model: AllenNLP's two files ({cls}(options_file, weight_file, ...)), a spacy-elmo "
        "model directory or \"default\" (the bundled model) as options_file with weight_file=None, or "
        "module=<a spacy_elmo BiLM> with both files None."
    )
    E_COMPAT_URL = (
        "{path} is a URL, but spacy-elmo reads local files only (AllenNLP downloaded URLs into its cache). "
        "Download it first (e.g. curl -LO {path}) and pass the local path."
    )
    E_COMPAT_MODULE_WITH_FILES = (
        "Elmo(module=...) takes no options_file or weight_file: pass None for both (as in AllenNLP), "
        "or drop module= to load the files."
    )
    E_COMPAT_MODULE_TYPE = (
        "Elmo(module=...) must be a spacy_elmo BiLM (BiLM.load(dir), BiLM.from_allennlp(options, weights)); "
        "found {a_type}. Another module (AllenNLP's _ElmoBiLm, a custom biLM) is not run here: load its "
        "files with Elmo(options_file, weight_file, ...) instead."
    )
    E_COMPAT_VOCAB_TO_CACHE = (
        "{cls}(vocab_to_cache=...) is not supported: spacy-elmo takes character ids only, never word ids. Pass "
        "vocab_to_cache=None and feed it batch_to_ids(sentences): on the CPU each distinct token of a batch is "
        "encoded once already (a GPU encodes them all faster than it finds the distinct ones), and for inference over a corpus spacy_elmo.embedding.embed_file / `spacy-elmo embed` "
        "reuse the vectors of repeated words across batches (--cache-size)."
    )
    E_COMPAT_WORD_INPUTS = (
        "{cls}.forward(word_inputs=...) is not supported (AllenNLP used it only with vocab_to_cache, which "
        "spacy-elmo does not take): call it on the character ids alone, from batch_to_ids(sentences)."
    )
    E_COMPAT_PROJECTION_DIM = (
        "ElmoTokenEmbedder(projection_dim=...) must be None (or 0, as in AllenNLP) for the ELMo vectors as they "
        "are, or a whole number of 1 or more for a trained linear projection to that width; found {value!r}."
    )
    E_COMPAT_NUM_OUTPUTS = (
        "num_output_representations must be a whole number of 0 or more (typically 1 or 2); found {value!r}."
    )
    E_COMPAT_MIX_PARAMETERS = (
        "scalar_mix_parameters has {found} values, but this biLM has {expected} layers (the token layer and "
        "each LSTM layer): give one pre-softmax weight per layer, e.g. {example} for the first LSTM layer only."
    )
    E_COMPAT_INPUT_SHAPE = (
        "{cls} expects character ids of shape (batch, timesteps, {max_chars}) (or with more leading dimensions), "
        "as batch_to_ids(sentences) returns; found shape {shape}."
    )
    E_COMPAT_CUDA_DEVICE = (
        "cuda_device must be a whole number: -1 for the CPU, or the index of a CUDA device; found {value!r}."
    )
    E_COMPAT_NO_CUDA_DEVICE = (
        "cuda_device={value} names no CUDA device: torch sees {count} (torch.cuda.device_count(); 0 with a "
        "CPU-only torch or no visible GPU). Pass cuda_device=-1 for the CPU, or a GPU's index below {count}."
    )
    E_COMPAT_BATCH_SIZE = "batch_size must be a whole number of 1 or more; found {value!r}."
    E_COMPAT_STATE_TYPE = (
        "{cls}.load_allennlp_state_dict takes the state_dict of AllenNLP's {cls} (a dict of tensors, e.g. "
        "torch.load('best.th', map_location='cpu')) or the path of a file holding one; found {a_type}."
    )
    E_COMPAT_STATE_FILE_MISSING = (
        "The state_dict file {path} does not exist. Pass the file AllenNLP's trainer wrote (best.th, "
        "model_state_epoch_N.th in the serialization directory) or the dict of tensors itself."
    )
    E_COMPAT_STATE_FILE_IS_DIR = (
        "{path} is a directory; {cls}.load_allennlp_state_dict reads the state_dict file inside an AllenNLP "
        "serialization directory (best.th): pass that file. A spacy-elmo model directory loads with "
        "{cls}(directory, None, ...)."
    )
    E_COMPAT_STATE_NOT_TORCH = (
        "{path} is not a torch state_dict file ({error}). {cls}.load_allennlp_state_dict reads the file of "
        "AllenNLP's trainer (best.th, model_state_epoch_N.th: tensors only) or a dict of tensors. For the "
        "released .hdf5 weights and their options.json use {cls}(options_file, weight_file, ...); a damaged "
        "best.th must be copied again from its source."
    )
    E_COMPAT_STATE_DTYPE = (
        "{path}: {name!r} holds {dtype} values, but weights are floating point (AllenNLP's are float32). The "
        "state_dict is damaged or not an AllenNLP model's: load the state_dict the AllenNLP model saved, "
        "unchanged (torch.load('best.th'))."
    )
    E_COMPAT_STATE_PREFIX = (
        "No key of the state_dict starts with prefix={prefix!r}.{hint} Print the keys (list(state_dict)) and "
        "pass prefix= the part before 'scalar_mix_0.gamma', e.g. '_text_field_embedder.token_embedder_elmo._elmo.'."
    )
    E_COMPAT_STATE_PREFIX_HINT = " AllenNLP {cls} weights are under prefix={found}: pass one of those."
    E_COMPAT_STATE_NOT_TENSOR = (
        " Weights are tensors (as torch.load reads them from the best.th AllenNLP saved): convert a NumPy array "
        "with torch.from_numpy(array), a list with torch.tensor(values)."
    )
    E_COMPAT_STATE_KEYS = (
        "The state_dict (prefix={prefix!r}) does not match AllenNLP's Elmo with this biLM and {n} output "
        "representation(s): {problems}.{hint} Build this Elmo from the options file the AllenNLP model was trained "
        "with and with its num_output_representations; strict=False skips unexpected keys and missing scalar "
        "mixes (a shape mismatch or a biLM only partly present is an error either way)."
    )
    E_COMPAT_TOKEN_STATE_PREFIX = (
        "No key of the state_dict starts with prefix={prefix!r} followed by '_elmo.'.{hint} Print the keys "
        "(list(state_dict)) and pass prefix= the part before '_elmo.scalar_mix_0.gamma', e.g. "
        "'_text_field_embedder.token_embedder_elmo.' (Elmo.load_allennlp_state_dict takes the part before "
        "'scalar_mix_0.gamma')."
    )
    E_COMPAT_TOKEN_STATE_KEYS = (
        "The state_dict (prefix={prefix!r}) does not match AllenNLP's ElmoTokenEmbedder as this one is built: "
        "{problems}.{fix} Build the ElmoTokenEmbedder from the options file and with the projection_dim the "
        "AllenNLP model was trained with; strict=False skips unexpected keys and keeps a missing projection (a "
        "shape mismatch or a projection only partly present is an error either way)."
    )
    E_COMPAT_TOKEN_STATE_PROJECTION_DIM = (
        " The AllenNLP model projects its ELMo vectors to {dim}: build this ElmoTokenEmbedder with "
        "projection_dim={dim}."
    )
    E_COMPAT_TOKEN_STATE_NO_PROJECTION = (
        " The AllenNLP model has no projection (no _projection.weight / .bias): build this ElmoTokenEmbedder "
        "without projection_dim."
    )
    E_COMPAT_STATE_PROJECTION = (
        "The state_dict's _elmo_lstm._token_embedder._projection is not the identity, but this biLM's char-CNN "
        "width equals its projection width ({n}), so it has no projection to hold it (the AllenNLP model trained "
        "its projection). Such a model cannot be loaded; keep the projection frozen when fine-tuning."
    )
    E_COMPAT_STATE_MARKERS = (
        "The state_dict's {name} is {found}, but this biLM's sentence marker ids are {expected} (AllenNLP's "
        "ELMoCharacterMapper + 1): the state_dict comes from a biLM with another character vocabulary or "
        "max_characters_per_token, which spacy-elmo does not run."
    )
    E_COMPAT_ELMO_LSTM = (
        "{cls} has no {name} (AllenNLP's _ElmoBiLm): spacy-elmo's biLM is elmo.bilm, a spacy_elmo BiLM. "
        "For elmo._elmo_lstm._elmo_lstm.reset_states() call elmo.reset_states() (it forgets the carried LSTM "
        "states); for the biLM's parameters by AllenNLP's names, elmo.allennlp_state_dict()."
    )
    E_COMPAT_EMBED_FILE = (
        "ElmoEmbedder.embed_file is not provided. Embed a file with spacy_elmo.embedding.embed_file(bilm, "
        "input_path, output_path, layers='all') or `spacy-elmo embed INPUT OUTPUT --model MODEL`: they write "
        "AllenNLP's HDF5 layout (dataset per line plus sentence_to_index), with every sentence read on its own "
        "(bilm = BiLM.from_allennlp(options_file, weight_file), stateless)."
    )

    # --- embedding a corpus (spacy_elmo.embedding, spacy-elmo embed) ---------
    E_EMBED_INPUT_MISSING = "{path} does not exist. Pass a UTF-8 text file with one sentence per line."
    E_EMBED_INPUT_NOT_A_FILE = (
        "{path} is not a file (a directory, a pipe or a device): embed reads its input twice, one UTF-8 text file "
        "with one sentence per line. Pass such a file (gzip, bzip2 and xz files are read as they are)."
    )
    E_EMBED_INPUT_STDIN = (
        "embed does not read standard input ('-'): it reads its input twice (its lines counted and digested, then "
        "embedded), which a pipe cannot give. Write the text to a file (e.g. `... > text.txt`) and pass that file."
    )
    E_EMBED_INPUT_CHANGED = (
        "{path} changed while it was embedded: its text is no longer the one read at the start (each part is "
        "checked before it is embedded, so none was written from the changed text). Run again once nothing "
        "writes to the file: the parts kept are reused if it holds the first text again; with another text, "
        "pass --restart to drop them."
    )
    E_EMBED_WHITESPACE_AND_LANG = (
        "--whitespace splits the lines at whitespace and --lang {lang} reads them with spaCy's tokenizer: give one "
        "of them (neither: the language the model was pretrained on, whitespace for a model that records none)."
    )
    E_EMBED_LAYERS = "Unknown layers {layers!r}: use 'all' (every layer), 'top' or 'average'."
    E_EMBED_LINE_TOO_LONG = (
        "{path} line {line} has {n} tokens, more than --max-tokens {max_tokens}. The input is one sentence "
        "per line: split that line, or raise --max-tokens if you really want it embedded in one piece. Lines end "
        "at \\n only: a file whose lines end in \\r alone (classic Mac OS) is one line; convert it (tr '\\r' '\\n')."
    )
    E_EMBED_TOKENIZE_RESULT = (
        "tokenize returned {a_type} for {path} line {line}; it must return the line's tokens as a list "
        "of strings (a str would be read as one token per character), e.g. tokenize=lambda line: line.split()."
    )
    E_EMBED_TOKEN_NOT_STR = (
        "tokenize returned {a_type} as token {index} of {path} line {line}; tokens must be strings "
        "(for spaCy: tokenize=lambda line: [t.text for t in nlp.tokenizer(line)])."
    )
    E_EMBED_STATEFUL = (
        "Embedding a corpus reads every line on its own; load the biLM with stateful=False."
    )
    E_EMBED_OUTPUT_EXISTS = "{path} already exists. Pass --overwrite to replace it, or choose another output."
    E_EMBED_IN_USE = (
        "Another embed (pid {pid}) is writing {path}: two runs into one output would mix their parts. Wait for it "
        "to end, or stop it and rerun this command (it goes on from the parts written), or choose another output."
    )
    E_EMBED_PARTS_MISMATCH = (
        "{parts} holds parts of an earlier run with a different {keys}, so they cannot be reused. "
        "Rerun {earlier}{rerun} to finish it, or delete {parts} (or pass --restart) to start over."
    )
    #: E_EMBED_PARTS_MISMATCH's ``earlier`` where a setting differs (the model, the tokenizer, a batch size...)
    E_EMBED_EARLIER_SETTINGS = "with the earlier settings"
    #: E_EMBED_PARTS_MISMATCH's ``earlier`` where the text differs (``path`` edited or replaced since), settings or not
    E_EMBED_EARLIER_TEXT = "on the text the earlier run read ({path} as it was then)"
    #: E_EMBED_PARTS_MISMATCH's ``rerun`` where the earlier run split the lines at whitespace (``embed``'s default
    #: before it read with the model's language)
    E_EMBED_RERUN_WHITESPACE = " (`spacy-elmo embed` with --whitespace: the earlier run split the lines at whitespace)"
    #: E_EMBED_PARTS_MISMATCH's ``rerun`` where the earlier run read with spaCy's tokenizer of ``lang``
    E_EMBED_RERUN_LANG = (
        " (`spacy-elmo embed` with --lang {lang}, spaCy's tokenizer then being {block}: the earlier run read with it)"
    )
    #: E_EMBED_PARTS_MISMATCH's ``rerun`` where the earlier run read with the ``lang`` of this one, but spaCy's tokenizer
    #: then was another (a package it needs installed or removed since) or read with other rules (another spaCy)
    E_EMBED_RERUN_INSTALL = (
        " (this run reads language {lang!r} as the earlier one did, but spaCy's tokenizer was then {block}, or read "
        "with other rules where that is this run's block: install again the package that tokenizer needs, or the "
        "spaCy that read it)"
    )
    E_EMBED_PARTS_TOKENIZED = (
        "{part} (lines {first}-{last} of {path}) was written from other tokens than this run's tokenizer "
        "({tokenizer}) gives for those lines: the earlier run used another tokenizer of the same name (two "
        "lambdas share one). Rerun with the earlier tokenizer to finish it, or delete {parts} (or pass --restart) "
        "to start over; give each tokenizer its own tokenizer_name so that a resume tells them apart by name."
    )
    E_EMBED_PARTS_OLD = (
        "{parts} holds parts written by an older spacy-elmo, which did not record {keys}, so they cannot "
        "be checked against this run. Pass --restart (or delete {parts}) to embed from the start."
    )
    E_EMBED_PARTS_NO_MANIFEST = (
        "{parts} has no {name} (deleted?), which records the settings, text and tokens its parts were embedded from: "
        "without it they cannot be checked against this run. Pass --restart (or delete {parts}) to embed from the start."
    )
    E_EMBED_MANIFEST_DAMAGED = (
        "{path} cannot be read ({error}): it records the settings, text and tokens the parts in {parts} were "
        "embedded from, and without it they cannot be checked against this run. Pass --restart (or delete {parts}) "
        "to embed from the start."
    )
    #: E_EMBED_MANIFEST_DAMAGED's ``error`` for a manifest whose parts' token digests are no list of strings
    E_EMBED_MANIFEST_TOKENS = "its {key} is {found}, not a list of the parts' token digests"
    E_EMBED_INTERRUPTED = (
        "Interrupted. The finished parts are kept in {parts}: rerun the same command to embed the rest "
        "(--restart starts over)."
    )
    E_EMBED_NO_SPACE = (
        "The run stopped: writing {path} ran out of space ({error}). The parts it finished are kept in {parts} "
        "(the merged OUTPUT takes as much room again at the end). Free space on that disk (or lift the file-size "
        "limit), then rerun the same command to continue from them; or, for an OUTPUT on a larger disk, move "
        "{parts} beside it as NEW_OUTPUT.parts (a run finds its parts by OUTPUT's name) and rerun the command with "
        "NEW_OUTPUT: another OUTPUT without them starts over."
    )
    E_EMBED_INTERRUPTED_EARLY = "Interrupted before any part was started: nothing was written."
    E_EMBED_OUTPUT_IS_INPUT = (
        "{path} is the input itself: embedding into it would replace the text with its vectors. "
        "Choose another output path."
    )
    E_EMBED_OUTPUT_PARENT = "{path} cannot be created: {parent} is a file, not a directory. Choose another output path."
    E_EMBED_PARTS_NOT_DIR = (
        "{parts} is not a directory: embed keeps the finished parts of {path} in a directory of that name, which it "
        "creates and deletes. Move {parts} elsewhere (it was left as it is), or choose another output path."
    )
    E_EMBED_OUTPUT_IS_DIR = (
        "{path} is a directory, but the output is one HDF5 file (--overwrite replaces a file, not a "
        "directory). Give a file path such as {example}, or remove the directory."
    )
    # --- building spacy_elmo._C: printed by setup.py (through build_flags.py), which then stops ---------
    E_BUILD_NO_TORCH = (
        "spacy-elmo: building spacy_elmo._C needs torch, which this Python cannot import ({error}). Install "
        "torch and the build tools first (`pip install torch==2.13.0 \"setuptools>=77\" wheel ninja`, or with "
        "the CPU build of torch: `pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`, "
        "then `pip install \"setuptools>=77\" wheel ninja`), then `pip install --no-cache-dir "
        "--no-build-isolation` again; or set SPACY_ELMO_NO_EXTENSION=1 to install without the compiled extension "
        "(the pure-PyTorch reference path: exact, but slower), which still needs setuptools>=77."
    )
    E_BUILD_NO_COMPILER = (
        "spacy-elmo: building spacy_elmo._C needs a C++ compiler, and {cxx!r} ({source}) is not on PATH. "
        "Install one (e.g. `apt install g++`, `dnf install gcc-c++`, or clang; on macOS `xcode-select "
        "--install`) or point CXX at it, then install again; or set SPACY_ELMO_NO_EXTENSION=1 to install "
        "without the compiled extension (the pure-PyTorch reference path: exact, but slower)."
    )
    E_BUILD_OLD_SETUPTOOLS = (
        "spacy-elmo: installing it needs setuptools 77 or later (pyproject.toml's license field), and this Python "
        "has setuptools {version} (an install with --no-build-isolation uses the environment's own). Upgrade the "
        "build tools: `pip install \"setuptools>=77\" wheel ninja`, then install again."
    )
    E_BUILD_CUDA_CPU_TORCH = (
        "spacy-elmo: SPACY_ELMO_CUDA=1 asks for the CUDA kernels of spacy_elmo._C, but the installed torch "
        "({torch}) is a CPU-only build (torch.version.cuda is None), which cannot build them. Install a CUDA "
        "build of torch (on Linux, PyPI's `pip install torch==2.13.0` is one), then install again; or unset "
        "SPACY_ELMO_CUDA (auto: the CUDA kernels when torch has CUDA and nvcc exists) or set it to 0 to build "
        "the CPU kernels only."
    )
    E_BUILD_CUDA_NO_TOOLKIT = (
        "spacy-elmo: SPACY_ELMO_CUDA=1 asks for the CUDA kernels of spacy_elmo._C, but torch found no CUDA "
        "toolkit to compile them with (no nvcc on PATH, CUDA_HOME unset). Install the CUDA toolkit of torch's "
        "CUDA ({cuda}) and put its bin/ on PATH or set CUDA_HOME to its root (e.g. /usr/local/cuda), then install "
        "again; or unset SPACY_ELMO_CUDA (auto) or set it to 0 to build the CPU kernels only."
    )


class TokenizerMismatchWarning(UserWarning, RuntimeWarning):
    """The tokens a model is read with are not those it was pretrained on (another language or tokenizer): the
    ``elmo`` component's warning (W_ELMO_OTHER_TOKENS, W_ELMO_OTHER_LANG) and that of the commands that read text for
    a model (W_READ_OTHER_TOKENS). A category of its own, so that a suite run with ``filterwarnings = error`` can
    ignore it (``ignore::spacy_elmo.errors.TokenizerMismatchWarning``); a ``UserWarning`` and a ``RuntimeWarning``
    both, as the component's and the commands' were before, so that filters of those still apply."""


class Warnings:
    W_STAGE_RENDEZVOUS = (
        "spacy-elmo: replace {placeholder} in the command above with the --rdzv-endpoint this run was started with "
        "(torchrun does not tell its workers the endpoint the machines met at), then run it on every machine."
    )
    W_WEIGHTS_ALL_ZERO = (
        "spacy-elmo: the weight {matrices} {names} of {path} {are} all zeros, which no trained ELMo has: the file is "
        "most likely an incomplete copy (a download into a pre-allocated file stopped early leaves zeros at its end). Copy it again "
        "from its source and compare its size or checksum with the published one."
    )
    W_FORK_HOOK_FAILED = (
        "spacy-elmo: renewing {hook} in this forked child failed ({error}); the other locks and caches were "
        "renewed. If the child hangs or misbehaves, use the spawn start method (nlp.pipe(n_process=N) under "
        "multiprocessing.set_start_method('spawn')) and report this."
    )
    W_INITIAL_STATE_NOT_EXPORTED = (
        "spacy-elmo: the AllenNLP/bilm-tf weight format has no place for the fitted initial state; "
        "{path} starts from zeros (export with --format native, or save with BiLM.save, to keep it)."
    )
    W_PROVENANCE_NOT_EXPORTED = (
        "spacy-elmo: {path} holds the weights only: the AllenNLP/bilm-tf files have no place for how the model "
        "was trained ({what}), so {readers}, and the elmo component cannot check its pipeline's language and "
        "tokenizer against the model's. Export with --format native (BiLM.save) to keep them."
    )
    #: W_PROVENANCE_NOT_EXPORTED's ``readers``: embed reads a model without a language at whitespace
    W_PROVENANCE_EMBED = (
        "`spacy-elmo embed` splits its lines at whitespace, not with spaCy's tokenizer, unless told (embed --lang {lang})"
    )
    #: W_PROVENANCE_NOT_EXPORTED's ``readers`` too, before W_PROVENANCE_EMBED, where evaluate reads otherwise
    W_PROVENANCE_EVALUATE = (
        "`spacy-elmo evaluate` reads text for them as one stream in English unless told ({flags})"
    )
    W_ALLENNLP_WILL_NOT_LOAD = (
        "spacy-elmo: {path} is a valid bilm-tf weight file (and spacy-elmo reads it), but AllenNLP will not "
        "run this model: {reasons}. Export with --format native to keep it for spacy-elmo alone."
    )
    W_ALLENNLP_REASON_NO_SKIP = "use_skip_connections is false (AllenNLP loads only biLMs with residual connections)"
    W_ALLENNLP_REASON_MAX_CHARS = (
        "max_characters_per_token is {value} (AllenNLP always spells a token in 50 character slots)"
    )
    W_BILM_TF_WILL_NOT_RUN = (
        "spacy-elmo: {path} is a valid AllenNLP weight file (AllenNLP and spacy-elmo run it as this model), but "
        "bilm-tf {reasons}. For a file bilm-tf runs too, train with projection_dim below the LSTM's dim and "
        "filters whose counts sum to at least projection_dim; otherwise use it with AllenNLP or spacy-elmo only."
    )
    W_BILM_TF_REASON_FEW_FILTERS = (
        "builds no graph for it: its char-CNN has {n_filters} filters, fewer than projection_dim {projection_dim} "
        "(bilm-tf asserts n_filters > projection_dim when they differ)"
    )
    W_BILM_TF_REASON_P_EQUALS_C = (
        "loads it without error and computes another model: projection_dim equals the LSTM's dim ({projection_dim}), "
        "where bilm-tf builds its LSTM cells without a projection (it never reads W_P_0, nor applies proj_clip)"
    )
    W_BILM_TF_REASON_P_ABOVE_C = (
        "refuses to load it: projection_dim {projection_dim} is above the LSTM's dim {dim}, where bilm-tf builds its "
        "LSTM cells without a projection, whose W_0 has another shape than the file's"
    )
    # {fix} of W_NO_EXTENSION and E_FUSED_UNAVAILABLE: W_FIX_BUILD, on Windows W_FIX_WINDOWS
    # (spacy_elmo.ops.extension.extension_fix).
    W_NO_EXTENSION = (
        "spacy-elmo: the compiled extension spacy_elmo._C is not available ({reason}); "
        "using the pure-PyTorch reference path (exact, but slower). {fix}"
    )
    # SPACY_ELMO_NO_EXTENSION=0 inside each command: a 1 still exported from the install that built no _C
    # would otherwise make the pasted rebuild build none again.
    W_FIX_BUILD = (
        "Build it against the installed torch (needs a C++ compiler and ninja), with SPACY_ELMO_NO_EXTENSION=0 "
        "(as unset; 1 builds none): " + _rebuild("SPACY_ELMO_NO_EXTENSION=0") + "."
    )
    # The fused ops on CUDA tensors that run the reference instead (spacy_elmo.ops.cuda_route): once each.
    W_FUSED_NO_CUDA_KERNELS = (
        "spacy-elmo: spacy_elmo._C was built without its CUDA kernels (its build found no CUDA toolkit: "
        "nvcc / CUDA_HOME), so the fused ops on CUDA tensors run the pure-PyTorch reference path (exact, but "
        "slower); on the CPU they still run the fused kernels. For the CUDA kernels install the CUDA toolkit "
        "of torch's CUDA ({cuda}) and build it again with SPACY_ELMO_CUDA=1 set: " + _rebuild("SPACY_ELMO_CUDA=1")
        + " (`spacy-elmo "
        "info` shows what was built)."
    )
    W_FUSED_CUDA_MANY_FILTERS = (
        "spacy-elmo: the char CNN has {n} filters and its CUDA kernel takes at most {limit}, so on CUDA it runs "
        "the pure-PyTorch reference path (exact, but slower). For the fused kernel use at most {limit} "
        "filters (BiLMConfig.filters)."
    )
    W_FUSED_CUDA_SHARED_MEMORY = (
        "spacy-elmo: the char CNN's CUDA kernel needs {need} bytes of shared memory per block ({width} "
        "characters per token x {dim} embedding dims x 4 bytes), above the {limit} this GPU allows, so on "
        "CUDA it runs the pure-PyTorch reference path (exact, but slower). For the fused kernel keep "
        "max_characters_per_token x char_embedding_dim at most {fit}."
    )
    # The {reason} where the package has no _C file at all (not a file that fails to load).
    W_EXTENSION_NOT_BUILT = (
        "not built: {folder} has no _C file; an install with SPACY_ELMO_NO_EXTENSION=1 builds none, as does "
        "one on Windows, and a source checkout has none until it is built"
    )
    W_NOT_BUILT_ON_WINDOWS = "spacy-elmo builds none on Windows, see the README's Platforms; {reason}"
    W_FIX_WINDOWS = (
        "MSVC cannot compile its kernels (GCC vector extensions): for the fused kernels install and run "
        "spacy-elmo under WSL2 (Linux), where it builds."
    )
    # Printed by setup.py (through build_flags.py).
    W_BUILD_NO_EXTENSION_WINDOWS = (
        "spacy-elmo: building no compiled extension on Windows: MSVC cannot compile the kernels' GCC vector "
        "extensions (csrc/include/kernels_impl.h). The package installs with the pure-PyTorch reference path "
        "(exact, but slower); for the fused kernels install it under WSL2 (Linux)."
    )
    W_BUILD_NO_OPENMP = (
        "spacy-elmo: building spacy_elmo._C without OpenMP: the torch at {torch_dir} ships no libomp "
        "(include/omp.h and lib/libomp.dylib, which torch's macOS wheels from pypi.org have) and Apple clang "
        "brings none. The fused kernels' own loops will run on one thread (the matrix products inside them "
        "still use torch's threads). For threaded kernels install a torch wheel from pypi.org and rebuild: "
        + _rebuild() + "."
    )
    W_EXTENSION_OTHER_TORCH = (
        "{reason}: most likely a build for another torch than the installed {torch} "
        "(torch was upgraded or downgraded after spacy-elmo was built)"
    )
    # `spacy-elmo info` of SPACY_ELMO_NO_EXTENSION and SPACY_ELMO_CUDA, which only a build reads: with the rebuild
    # command for a value the switch takes, without it for one it does not (its problem, said next, names the fix).
    W_INFO_SWITCH_BUILD_TIME_INVALID = "read by setup.py alone, when it builds the extension: at run time it changes nothing."
    W_INFO_SWITCH_BUILD_TIME = (
        W_INFO_SWITCH_BUILD_TIME_INVALID[:-1] + "; to apply it, rebuild with it set: " + _rebuild("{setting}") + "."
    )
    # What `spacy-elmo info` says of a build that lacks something (spacy_elmo.cli.info).
    W_INFO_NO_EXTENSION = (
        "no, the pure-PyTorch reference path runs (exact, but slower). Reason: {reason}. Fix: {fix}"
    )
    W_INFO_STALE_EXTENSION = (
        "spacy_elmo._C loads but was built from an older spacy-elmo (it has no build_info()), so its kernels "
        "may not be this version's. Rebuild it: {fix}"
    )
    # The SPACY_ELMO_* environment switches (spacy_elmo.switches): a value a switch does not take, and
    # what runs instead (each switch's fallback).
    W_SWITCH_UNKNOWN = (
        "{name}={value!r} is none of the values spacy-elmo takes for it ({accepted}), so {instead}. "
        "Unset it, or set one of those."
    )
    W_SWITCH_ANY_PATH = "a directory path, not empty"
    W_SWITCH_INSTEAD_NO_EXTENSION = "spacy_elmo._C is built, as when it is unset"
    W_SWITCH_INSTEAD_CUDA = (
        "the CUDA kernels are built when torch has CUDA and nvcc exists (auto), as when it is unset"
    )
    W_SWITCH_INSTEAD_CPU_ISA = "the base CPU kernel table runs (the narrowest one)"
    W_SWITCH_INSTEAD_CHAR_CNN_MMA = (
        "the fp16/bf16 char CNN runs on tensor cores where it can (1), as when it is unset"
    )
    W_SWITCH_INSTEAD_LSTM_PRODUCTS = (
        "the CUDA LSTM picks batched or per-direction products by dtype and size (auto), as when it is unset"
    )
    W_SWITCH_INSTEAD_KEEP_FREED_MEMORY = (
        "pretrain keeps freed memory for reuse (1), as when it is unset"
    )
    W_SWITCH_INSTEAD_CACHE = "~/.cache/spacy-elmo is used, as when it is unset"
    W_INFO_GPU_NO_CODE = (
        "the CUDA kernels cannot run on it: they were compiled for {archs} only, none at or below its "
        "capability; build it again with TORCH_CUDA_ARCH_LIST={cap} set: " + _rebuild("TORCH_CUDA_ARCH_LIST={cap}")
    )
    W_INFO_GPU_NO_CUDA_KERNELS = (
        "the fused ops run the reference path on it: spacy_elmo._C was built without its CUDA kernels (no CUDA "
        "toolkit found); install the CUDA toolkit and build it again with SPACY_ELMO_CUDA=1 set: "
        + _rebuild("SPACY_ELMO_CUDA=1")
    )
    W_INFO_GPU_NO_TENSOR_CORES = (
        "the fp16/bf16 char CNN runs on CUDA cores, about 4x slower: the kernels it runs were compiled for "
        "{arch}, and the tensor-core kernel needs 8.0 or later; build it again with TORCH_CUDA_ARCH_LIST={cap} set: "
        + _rebuild("TORCH_CUDA_ARCH_LIST={cap}")
    )
    W_INFO_NO_OPENMP = (
        "no: the fused kernels' own loops run on one thread (the matrix products inside them still use torch's "
        "threads). A macOS build against a torch without libomp (include/omp.h, lib/libomp.dylib) lacks it: "
        "install a torch wheel from pypi.org, which ships libomp, and rebuild spacy-elmo: " + _rebuild() + "."
    )

    # --- pretraining and CLI (spacy_elmo.training, spacy_elmo.cli) ----------
    W_BINARY_SKIPPED = "spacy-elmo: skipped {path}: it looks binary (NUL bytes), not text."
    W_UNREAD_FORMAT_SKIPPED = (
        "spacy-elmo: skipped {path}: it holds {what}, which spacy-elmo does not read. {fix}. Once converted, move it "
        "out of the corpus directory (or delete it): left there, the next run tells another output for it, and "
        "following that too reads the text twice."
    )
    #: W_UNREAD_FORMAT_SKIPPED's fixes (Errors.E_UNREAD_*_FIX's for a file passed alone): text put beside the file
    W_UNREAD_COMPRESSION_FIX = (
        "To train on it, decompress it into the corpus (`{tool} -dc {shell_path} > {text}`), or compress it with "
        "gzip instead (`{tool} -dc {shell_path} | gzip > {gz}`)"
    )
    W_UNREAD_COMPRESSED_TAR_FIX = (
        "If it holds text files, unpack it into the corpus to train on them (`mkdir {dir} && {tool} -dc "
        "{shell_path} | tar -x -C {dir}`)"
    )
    W_UNREAD_ARCHIVE_FIX = "If it holds text files, unpack it into the corpus to train on them (`{unpack}`)"
    W_UNREAD_DOCUMENT_FIX = (
        "To train on it, export its text as plain UTF-8 text into the corpus (from the program that made it, or "
        "`pandoc -f {pandoc} {shell_path} -t plain -o {text}` for a .{pandoc})"
    )
    W_WIDE_TEXT_SKIPPED = (
        "spacy-elmo: skipped {path}: it looks like {encoding} text, not UTF-8. To train on it, re-encode it to UTF-8 "
        "into the corpus (`iconv -f {encoding} -t UTF-8 {shell_path} > {text}`). Once converted, move it out of the "
        "corpus directory (or delete it): left there, the next run tells another output for it, and following that "
        "too reads the text twice."
    )
    W_TRAIN_PATH_OUTPUTS_SKIPPED = (
        "spacy-elmo: skipped {n_dirs} under {path} holding a model or spacy-elmo's output (a pretrain "
        "OUTPUT_DIR, a native or AllenNLP model, embed's parts): {dirs}. Their files (config.json, options.json, "
        "vocab.txt, the log) are no corpus text. Move them out of the corpus directory to silence this."
    )
    W_REPLACED_BYTES = (
        "spacy-elmo: {n_bytes} in {n_files} ({files}) replaced by U+FFFD "
        "(the text is read as UTF-8; re-encode the files to UTF-8 to keep those characters)."
    )
    W_CONFIG_FORCE = "config's --force is deprecated: pass --overwrite, as export and embed spell it."
    W_DEMO_RANDOM_MODEL = (
        "The bundled default model is not installed (looked in {path}): the demo runs a randomly initialised "
        "'small' biLM, so its similarities are not meaningful (the mechanics are real). Pass --model MODEL_DIR "
        "for a trained model, or reinstall spacy-elmo with its data."
    )
    W_EMBED_CARRIAGE_RETURN = (
        "spacy-elmo: {path} line {line} (and maybe others) holds a carriage return (\\r) inside it: lines end at \\n "
        "only, so a file whose lines end in \\r alone (classic Mac OS) is read as one line. Convert it, e.g. "
        "`tr '\\r' '\\n' < IN > OUT`, if its lines end so."
    )
    W_EMBED_CLEANUP_INTERRUPTED = (
        "spacy-elmo: interrupted while removing the parts of {path}, after it was complete: it holds every line. "
        "The next embed into {path} removes what is left of them ({parts}); or delete it."
    )
    W_REPLACED_BYTES_TEXT = (
        "{n_bytes} replaced by U+FFFD in {path} (re-encode it to UTF-8 to keep those characters)."
    )
    W_FIT_STATE_SENTENCES_MODEL = (
        "{model} was pretrained with --sentences, to read every sentence from the zero state (the elmo component's "
        "way): the fitted state replaces the start it learnt, and may read sentences worse (the bundled model "
        "fine-tuned with --sentences: 328.16 per sentence, 374.38 with a fitted state). Compare `spacy-elmo evaluate {shell_model} "
        "HELDOUT` with and without it: `spacy-elmo fit-state {shell_model} --clear` removes it."
    )
    W_FIT_STATE_NOTHING_TO_CLEAR = (
        "{model} has no fitted initial state: nothing to clear, the model was left as it was (its sentences already "
        "start from zeros)."
    )
    W_NUL_INSIDE = (
        "spacy-elmo: {path} holds {n_nuls} (first on line {line:,}) after the first {probe:,} bytes that tell "
        "binary files and UTF-16 text apart: likely binary data (a log, a dump) or UTF-16 text appended to the UTF-8 "
        "text (cat). They are read as characters of the tokens they touch. Remove them from the uncompressed text, e.g. "
        "tr -d '\\000' < FILE > NEW.txt (zcat FILE.gz | tr -d '\\000' > NEW.txt for a compressed one; tr on the .gz "
        "itself corrupts it), or re-encode the UTF-16 part to UTF-8 (iconv -f UTF-16 -t UTF-8)."
    )
    W_CARRIAGE_RETURN = (
        "spacy-elmo: {path} has {n_lines} holding a carriage return (\\r) inside (first: line {line:,}): lines end "
        "at \\n only, so a file whose lines end in \\r alone (classic Mac OS) is read as one line, its line ends no "
        "sentence ends (spaCy reads the \\r as whitespace). Convert the uncompressed text, e.g. tr '\\r' '\\n' < FILE > "
        "NEW.txt (zcat FILE.gz | tr '\\r' '\\n' > NEW.txt for a compressed one; tr on the .gz itself corrupts it), "
        "if its lines end so."
    )
    W_DEFAULT_IS_BUNDLED = (
        "spacy-elmo: 'default' names the bundled model, not the directory default here ({path}); to read that "
        "directory, pass ./default."
    )
    W_LONG_LINE = (
        "spacy-elmo: {path} has a line of {n_chars} characters; it is tokenized in pieces of "
        "at most {piece} characters (split at whitespace), each read as its own sentence or sentences (a sentence "
        "across a cut is read as two)."
    )
    W_RESUME_WITHOUT_HELDOUT = (
        "spacy-elmo: the run in {path} measured held-out perplexity on {heldout} (last at step {step:,}); resumed "
        "without --heldout, it measures none from here on. To go on measuring it, resume with --heldout {shell_heldout}."
    )
    W_RESUME_NOTHING_TO_TRAIN = (
        "spacy-elmo: the checkpoint in {path} is at step {step:,} and this run ends at step {total:,} ({option}): "
        "nothing was trained, and the checkpoint and model were left as they are. To train on, resume with "
        "--max-steps above {step:,} (or more --epochs)."
    )
    W_RESUME_NOTHING_TO_TRAIN_STALE = (
        "spacy-elmo: the checkpoint in {path} is at step {step:,} and this run ends at step {total:,} ({option}): "
        "nothing was trained. The checkpoint was left as it is; the model was written again from it, since a run "
        "stopped between the two writes had left {model}. To train on, resume with "
        "--max-steps above {step:,} (or more --epochs)."
    )
    W_RESUME_REMOVES_INITIAL_STATE = (
        "spacy-elmo: {path} (an initial state fitted by `spacy-elmo fit-state` or --state-sentences to the weights "
        "before this run) was removed with the model of step {step:,}: it does not fit the weights trained since. "
        "Run `spacy-elmo fit-state {shell_out} TEXT` again once training is done to fit one to them (or resume with "
        "--state-sentences N: every checkpoint then fits one)."
    )
    W_LONG_RUNS = (
        "spacy-elmo: {path} has {n_runs} of more than {cap} characters without whitespace that spaCy's rule-based "
        "tokenizer strips one character at a time (undecodable bytes read as U+FFFD, a run of '!' or emoji) or of "
        "more than {long} characters (minified CSS or JSON), in time quadratic in its length; each is cut into pieces "
        "of at most {cap} characters, each cut moved back by up to {back} characters to keep a character with the "
        "accents, variation selectors, joiners or Hangul jamo that continue it. "
        "Most characters spaCy splits one by one give the same tokens as the pipeline, which reads a stretch whole; "
        "a word, or a phrase of a language written without spaces, is split at the cuts. Shorter stretches spaCy "
        "reads quickly (a URL, a long word) are not cut, and a language's own tokenizer (SudachiPy for Japanese, "
        "PyThaiNLP for Thai: install it) cuts none."
    )
    W_BOM_INSIDE = (
        "spacy-elmo: {path} has {n_boms} after its start{at_line_starts}. It is read as a character of the word it "
        "touches ('\\ufeffThe' is a word of its own, with its own vector), as the pipeline reads it. Remove U+FEFF "
        "from the text, e.g. sed -i 's/\\xEF\\xBB\\xBF//g' FILE (GNU sed, on the uncompressed text){joined}."
    )
    #: W_BOM_INSIDE's ``at_line_starts`` where some begin a line (``which``: "", "all " or a count and a space)
    W_BOM_AT_LINE_STARTS = (
        ", {which}at the start of a line: files joined with `cat`, each beginning with a byte order mark, leave one "
        "before the first word of each"
    )
    #: W_BOM_INSIDE's ``joined`` where some begin a line
    W_BOM_JOINED = ", or strip each file's own (sed '1s/^\\xEF\\xBB\\xBF//') before joining the files"
    W_NFC_VARIANTS = (
        "spacy-elmo: {n_words} of the corpus {are} spelled in more than one Unicode normalization form, e.g. "
        "{spellings}, each {nfc!r} in NFC. Text is not normalized: each spelling is a vocabulary type of its own, "
        "trained apart, and the pipeline gives each its own vectors. Normalize the corpus to NFC and pretrain again "
        "(unicodedata.normalize('NFC', text) in Python, or uconv -x any-nfc), and give the pipeline NFC text too."
    )
    W_TOKENIZER_FALLBACK = (
        "spacy-elmo: {tokenizer} needs packages that are not installed ({error}); "
        "reading the text with spaCy's rule-based tokenizer instead (whitespace, then punctuation and the "
        "language's exceptions). {advice}"
    )
    #: W_TOKENIZER_FALLBACK's ``tokenizer``: spaCy's default of the language (pretrain's; a model's that records it)
    W_FALLBACK_SPACY = "spaCy's tokenizer for {language}"
    #: W_TOKENIZER_FALLBACK's ``tokenizer``: another block that the model records (pretrain --tokenizer's)
    W_FALLBACK_BLOCK_RECORDED = (
        "the tokenizer block the model's config.json records for {lang!r}, {block} (pretrain --tokenizer's, not "
        "spaCy's default for {lang!r}),"
    )
    #: W_FALLBACK_SPACY's ``language``: the one given (pretrain's --lang, or embed's, evaluate's, fit-state's)
    W_FALLBACK_LANG_GIVEN = "--lang {lang}"
    #: W_FALLBACK_SPACY's ``language``: the model's, read where no --lang was given (embed, evaluate, fit-state)
    W_FALLBACK_LANG_RECORDED = "{lang}, the language the model's config.json records (no --lang was given),"
    #: W_TOKENIZER_FALLBACK's ``advice`` where the text is read for no model yet (pretrain's: the model learns its tokens)
    W_FALLBACK_ADVICE = (
        "In a language written without spaces (Japanese, Thai) its tokens are whole "
        "phrases: install those packages instead. A pipeline must read the same tokens as the model was trained "
        "on: spacy.blank({lang!r}, config={{'nlp': {{'tokenizer': {{'@tokenizers': 'spacy.Tokenizer.v1'}}}}}})."
    )
    #: W_TOKENIZER_FALLBACK's ``advice`` where the text is read for a model that records no tokenizer block (embed,
    #: evaluate, fit-state of an earlier release's model, or another program's): which tokens it learnt is unknown
    W_FALLBACK_ADVICE_UNRECORDED = (
        "The model does not record the tokenizer it was pretrained with (an earlier release's model, or another "
        "program's): if it was pretrained with spaCy's tokenizer for {lang!r}, install those packages to read the "
        "text as it was read then."
    )
    #: W_TOKENIZER_FALLBACK's ``advice`` where the model records the block that cannot be built (embed, evaluate,
    #: fit-state): the model learnt that block's tokens, not the fallback's
    W_FALLBACK_ADVICE_RECORDED = (
        "Its tokens are not those the model learnt from (in a language written without spaces, whole phrases "
        "instead of words): install those packages to read the text as pretrain read the model's."
    )
    W_ELMO_OTHER_TOKENS = (
        "spacy-elmo: the {name} component's model {source} was pretrained on the tokens of spaCy's "
        "{lang!r} tokenizer {tokenizer}, but this pipeline is {nlp_lang!r} with tokenizer {nlp_tokenizer}: "
        "the biLM reads other tokens than it learnt from (e.g. whole phrases instead of words), and its "
        "vectors are worse for it. Build the pipeline with the model's language and tokenizer: in Python "
        "spacy.blank({lang!r}, config={{'nlp': {{'tokenizer': {tokenizer}}}}}); in a training config (the shipped "
        "ones have lang = \"en\" and spacy.Tokenizer.v1) [nlp] lang = \"{lang}\" and that [nlp.tokenizer] block, "
        "e.g. on the command line of spacy train: --nlp.lang {lang} --nlp.tokenizer '{tokenizer_json}'.{again}"
    )
    #: W_ELMO_OTHER_TOKENS's and W_ELMO_OTHER_LANG's ``again`` where this pipeline's tokenizer is its language's
    #: default, the one ``pretrain --lang`` reads with
    W_ELMO_PRETRAIN_AGAIN = (
        " Or pretrain a model on this pipeline's tokens: `spacy-elmo pretrain TEXT OUT_DIR --lang {nlp_lang}` reads "
        "the text with this very tokenizer."
    )
    #: and where it is another block that a model can record (one @tokenizers function): ``pretrain --tokenizer``'s
    W_ELMO_PRETRAIN_AGAIN_TOKENIZER = (
        " Or pretrain a model on this pipeline's tokens: `spacy-elmo pretrain TEXT OUT_DIR --lang {nlp_lang} "
        "--tokenizer tokenizer.cfg` reads the text with this very tokenizer, tokenizer.cfg holding these lines:\n"
        "{tokenizer_cfg}"
    )
    W_ELMO_SIMILARITY_LEXEME = (
        "spacy-elmo: {obj}.similarity() with the Lexeme {word!r} is 0.0: the {obj}'s vector is ELMo's, a word "
        "read in its context, and a Lexeme is a word without context, with no ELMo vector (only the vocab's static "
        "one, if any, of another space): the two cannot be compared. Compare with a Token, Span or Doc that the elmo "
        "component annotated instead, e.g. a token of {word!r} in a sentence, or nlp({word!r})."
    )
    W_ELMO_SIMILARITY_EMPTY = (
        "spacy-elmo: {obj}.similarity() with a {other} is 0.0: {which} empty or whitespace-only, with no ELMo "
        "vector (ELMo reads no word in it), and the two are not the same words: nothing can be compared (spaCy's "
        "own similarity() is 0.0 with W008 there too). Compare tokens, spans or docs with words in them."
    )
    W_ELMO_SIMILARITY_NO_ELMO = (
        "spacy-elmo: {obj}.similarity() with a {other} is 0.0: {which} (a doc the elmo component did not "
        "annotate: made by a pipeline without it, read back from bytes or a DocBin without doc._.elmo, or annotated "
        "with store 'none'), and an ELMo vector, a word read in its context, cannot be compared with a "
        "static vector or none. Run both through the same elmo pipeline (nlp(text) or nlp.pipe, with store 'all' "
        "or 'mix') and compare those."
    )
    W_ELMO_SOURCED_OTHER_WEIGHTS = (
        "spacy-elmo: the '{name}' component runs the biLM it was sourced with ({source}), not {requested!r}, "
        "which [initialize.components.{name}.weights_loader] names (--paths.elmo in the shipped configs): "
        "spaCy copies a component sourced from another pipeline ([components.{name}] source = ...) with its "
        "weights and its [components.{name}] settings, and never initializes it, so the loader and any other "
        "[components.{name}] or [components.{name}.model] settings have no effect. To use {requested!r}, "
        "drop `source` from [components.{name}]: a new component loads it at initialization (listening "
        "components sourced from the same pipeline were trained on {source}: retrain them, or source them "
        "with `replace_listeners` to give them their own copy of it). The sourced biLM is kept whatever "
        "--paths.elmo names: to keep it without this warning, {keep}."
    )
    #: W_ELMO_SOURCED_OTHER_WEIGHTS's ``keep`` for weights as loaded from ``source``
    W_ELMO_SOURCED_KEEP = "leave --paths.elmo empty, or set it to {source}"
    #: W_ELMO_SOURCED_OTHER_WEIGHTS's ``keep`` for fine-tuned weights (no path names them)
    W_ELMO_SOURCED_KEEP_TUNED = "leave --paths.elmo empty (the weights were fine-tuned: no path names them)"
    W_ELMO_WEIGHTS_TWICE = (
        "spacy-elmo: the '{name}' component's weights setting ({weights!r}) is not loaded: "
        "[initialize.components.{name}.weights_loader] names {requested!r} (--paths.elmo in the shipped configs), "
        "and the loader wins at initialization. A pipeline saved from this run carries the loaded weights, but its "
        "config.cfg still says weights = {weights!r}: a training run from that config without --paths.elmo loads "
        "those. Name the weights in one place: leave --paths.elmo empty to load [components.{name}] weights, or "
        "set weights = null."
    )
    W_ELMO_V1_LAYER_CACHE = (
        "spacy-elmo: this pipeline's elmo model (spacy_elmo.ElmoBiLM.v1, as saved before the layer cache "
        "became a training-run setting) has layer_cache_mb = {value}, so it keeps a cache of up to {value} MB "
        "of biLM output layers at inference too (GPU memory on a GPU). To switch it off: "
        "nlp.get_pipe(\"elmo\").layer_cache_mb = 0 after loading, or retrain or resave the pipeline with "
        "spacy_elmo.ElmoBiLM.v2 (no layer_cache_mb in [components.elmo.model]; set it in "
        "[initialize.components.elmo] layer_cache_mb for training)."
    )
    W_ELMO_SENTENCE_OVER_WINDOW = (
        "spacy-elmo: a sentence of {words} words reached {reader}, which reads at most "
        "max_window = {max_window} words at once: it is cut into {pieces} consecutive pieces of up to {max_window} "
        "words, each read on its own from the biLM's start state, so the vectors of words near a cut lack the "
        "context across it. To read such sentences whole, raise max_window to at least {raise_to} ({setting}): "
        "the biLM's memory grows with the longest row, above batch_tokens for a row longer than that. Warned once "
        "per biLM."
    )
    #: {reader} and {setting} of W_ELMO_SENTENCE_OVER_WINDOW for a biLM whose component is known: the ``elmo``
    #: component's, or a component's own copy (``nlp.replace_listeners``), whose spacy_elmo.ElmoBiLM.v2 block lies
    #: under ``[{block}]``
    W_ELMO_OVER_WINDOW_READER = "the biLM of the '{name}' component"
    W_ELMO_OVER_WINDOW_SETTING = (
        "max_window of the spacy_elmo.ElmoBiLM.v2 block in [{block}], or for a new \"elmo\" component "
        "nlp.add_pipe(\"elmo\", config={{\"model\": {{\"max_window\": {raise_to}}}}}), which nlp.replace_listeners "
        "copies"
    )
    #: {reader} and {setting} of W_ELMO_SENTENCE_OVER_WINDOW for a biLM of no known component
    W_ELMO_OVER_WINDOW_READER_UNNAMED = "the elmo biLM"
    W_ELMO_OVER_WINDOW_SETTING_UNNAMED = "max_window of its spacy_elmo.ElmoBiLM.v2 block in the pipeline's config"
    W_ELMO_OTHER_LANG = (
        "spacy-elmo: the {name} component's model {source} was pretrained on the tokens of spaCy's "
        "{lang!r} tokenizer (its settings were not recorded: an older model), but this pipeline is "
        "{nlp_lang!r}: the biLM reads other tokens than it learnt from, and its vectors are worse for it. Build "
        "the pipeline with the model's language (a model this old is checked by its language alone) and the "
        "tokenizer `spacy-elmo pretrain --lang {lang}` reads with here: in Python {python}; in a training config "
        "[nlp] lang = \"{lang}\" and that [nlp.tokenizer] block, on the command line of spacy train: --nlp.lang "
        "{lang} --nlp.tokenizer '{tokenizer_json}'.{again}"
    )
    #: W_ELMO_OTHER_LANG's ``python`` where that tokenizer is spaCy's default for the language
    W_ELMO_BLANK = "spacy.blank({lang!r})"
    #: W_ELMO_OTHER_LANG's ``python`` where it is not (spaCy's rule-based fallback: the default's packages are missing)
    W_ELMO_BLANK_TOKENIZER = "spacy.blank({lang!r}, config={{'nlp': {{'tokenizer': {tokenizer}}}}})"
    W_READ_OTHER_TOKENS = (
        "spacy-elmo: {model} was pretrained on the tokens of {trained}, but {path} is read with spaCy's {lang!r} "
        "tokenizer {tokenizer}: the biLM reads other tokens than it learnt from (e.g. whole phrases instead of "
        "words, or words instead of characters), and what it gives (vectors, perplexity, a fitted state) is worse "
        "for it. {fix}"
    )
    #: W_READ_OTHER_TOKENS's ``trained`` of a model that records its tokenizer block
    W_READ_TRAINED = "spaCy's {lang!r} tokenizer {tokenizer}"
    #: W_READ_OTHER_TOKENS's ``trained`` of a model pretrained before the tokenizer was recorded
    W_READ_TRAINED_UNRECORDED = "spaCy's {lang!r} tokenizer (its settings were not recorded: an older model)"
    #: W_READ_OTHER_TOKENS's ``fix`` where the language differs
    W_READ_FIX_LANG = "Read it with `--lang {lang}`, the model's language."
    #: W_READ_OTHER_TOKENS's ``fix`` where the model's language is one this spaCy cannot build (no --lang reads it)
    W_READ_FIX_LANG_MISSING = (
        "This spaCy cannot build the model's language {lang!r}, so no --lang reads the text as pretrain did: install "
        "the spaCy (or the package of that language) the model was pretrained with, e.g. in an environment of its own, "
        "or pretrain the model again on this language's tokens."
    )
    #: W_READ_OTHER_TOKENS's ``fix`` where the language is the model's and its recorded tokenizer cannot be built here
    W_READ_FIX_TOKENIZER = (
        "{opening}: the text is read with the "
        "tokenizer the model records, spaCy's {lang!r} tokenizer {tokenizer}, where it can be built, and here it "
        "cannot: a package it needs is missing (ja: SudachiPy and SudachiDict; ko: mecab-ko and natto-py; th: "
        "PyThaiNLP; vi: pyvi; zh's segmenter = \"jieba\" of pretrain --tokenizer: jieba), or this spaCy does not know it. Install that package (or the spaCy the model was "
        "pretrained with, e.g. in an environment of its own){again}.{lines}"
    )
    #: W_READ_FIX_TOKENIZER's ``opening`` where the model records spaCy's default block of the language (or none)
    W_READ_OPENING_SPACY = "spaCy's tokenizer for {lang!r} is another than when the model was pretrained"
    #: W_READ_FIX_TOKENIZER's ``opening`` where the model records another block (pretrain --tokenizer's, e.g. zh's
    #: segmenter = "jieba"): spaCy's default for the language did not change
    W_READ_OPENING_BLOCK = (
        "The tokenizer block the model records for {lang!r} (pretrain --tokenizer's, not spaCy's default for it) "
        "cannot be built here"
    )
    #: W_READ_FIX_TOKENIZER's ``again`` where the text is read as ``pretrain --lang`` reads that language here
    W_READ_AGAIN_LANG = (
        ", or pretrain the model again on this tokenizer's tokens (`spacy-elmo pretrain TEXT OUT_DIR --lang {lang}`)"
    )
    #: W_READ_FIX_TOKENIZER's ``lines`` with W_READ_AGAIN_TOKENIZER: tokenizer.cfg's lines (:func:`tokenizer_cfg`)
    W_READ_AGAIN_LINES = "\n{tokenizer_cfg}"
    #: W_READ_FIX_TOKENIZER's ``again`` where it is read with another block (the rule-based fallback of a recorded
    #: block, e.g. zh's segmenter = "jieba", where --lang zh reads characters): pretrain --tokenizer's
    W_READ_AGAIN_TOKENIZER = (
        ", or pretrain the model again on this tokenizer's tokens (`spacy-elmo pretrain TEXT OUT_DIR --lang {lang} "
        "--tokenizer tokenizer.cfg`, tokenizer.cfg holding the lines below)"
    )
    W_LISTENER_ZEROS = (
        "spacy-elmo: spacy debug model updates '{component}' alone, without its upstream '{upstream}': the ELMo "
        "listener in '{component}' reads zeros for the ELMo layers there, so the model's outputs shown have no "
        "ELMo features. (In spacy train and nlp.update '{upstream}' feeds it: a training batch without its layers "
        "is an error there.)"
    )
    W_INIT_WITHOUT_SOFTMAX = (
        "spacy-elmo: --init {path} has no softmax (AllenNLP/bilm-tf weights without softmax.safetensors, "
        "or a BiLM.save directory): the biLM starts from its weights, the vocabulary is built from this "
        "corpus and the softmax starts from random values, so the first steps' perplexity is that of an "
        "untrained softmax."
    )
    W_MODEL_PAST_MEMORY = (
        "spacy-elmo: these model sizes make a biLM of {n_params:,} parameters, {weights} of float32 weights; training "
        "it needs at least {need} (the weights, their gradients and the optimizer's state), more than {where} "
        "({has}). Once the corpus is tokenized, the run will most likely fail (\"can't allocate memory\") or swap "
        "at every step: stop it now (Ctrl-C) and choose smaller sizes (--preset, or --options: the original preset "
        "has 93.6M parameters, 357 MiB)."
    )
    W_INIT_READS_SENTENCES = (
        "spacy-elmo: --init {path} was pretrained with --sentences, to read every sentence from its start state "
        "(the elmo component's way), but this run trains without --sentences, on streams with carried states: "
        "the model it writes reads text as streams (and evaluate reads it so by default). Add --sentences to "
        "keep its reading."
    )
    W_VOCAB_OPTIONS_WITH_INIT = (
        "spacy-elmo: {options} unused: --init {path} brings its vocabulary with its softmax, and this corpus's "
        "other words are <UNK> targets. Add --new-vocab to build the vocabulary from this corpus with "
        "{options} (known words keep their softmax rows)."
    )
    W_INIT_VOCAB_OOV = (
        "spacy-elmo: {rate:.1%} of this corpus's words ({n_oov:,} of {n_words:,}) are not in the vocabulary of --init "
        "{path} ({size:,} entries), which is kept with its softmax: they are all <UNK> targets, and the model learns "
        "to predict <UNK> for them. Add --new-vocab to build the vocabulary from this corpus (words the model "
        "knew keep their softmax rows)."
    )
    W_EVAL_OOV = (
        "spacy-elmo: {rate:.1%} of the words of {path} (read with spaCy's '{lang}' tokenizer) are not in the vocabulary "
        "of {model} ({size:,} entries): they are all one target, <UNK>, which is easy to predict, so this perplexity "
        "is far below the text's own and compares with no other text or model. Evaluate text in the model's "
        "language (its config.json records {trained}; --lang chooses the tokenizer), or a model whose vocabulary covers "
        "this text (fine-tune one on it: `spacy-elmo pretrain TEXT NEW_DIR --init {shell_model} --new-vocab`)."
    )
    W_HELDOUT_IN_TRAINING = (
        "spacy-elmo: --heldout {path} is training text too ({n} of its file(s) under TRAIN_PATH, a link to one or a "
        "byte-identical copy of one, e.g. {file}, {how} {train_file}): the held-out perplexity is then that of text the "
        "model trains on, not of unseen text. Pass held-out text that TRAIN_PATH neither holds, links to nor copies "
        "(move a held-out file out of a TRAIN_PATH directory; a link to a training file is that file, and a copy "
        "its text)."
    )
    #: W_HELDOUT_IN_TRAINING's ``how`` for a held-out file that is a training file (the same, a link to it)
    W_HELDOUT_SAME_FILE = "the same file as"
    #: W_HELDOUT_IN_TRAINING's ``how`` for a held-out file that is another file with a training file's bytes
    W_HELDOUT_COPY = "a copy of"
    W_NEGATIVES_CLAMPED = (
        "spacy-elmo: --negatives {negatives} >= the vocabulary size {vocab}; using the full "
        "softmax instead of sampling."
    )
    # pretrain's OUTPUT_DIR, embed's OUTPUT, fit-state's MODEL_DIR, export's OUT_DIR (atomic.warn_if_not_locked);
    # {rival}: what is not refused meanwhile ("a second embed"; "a pretrain (or a second export)")
    W_OUTPUT_NOT_LOCKED = (
        "spacy-elmo: could not lock {name} {path} ({error}; some network file systems have no locks): {rival} "
        "into it while this {command} runs is not refused and would mix their files. Run one of them at a time "
        "there, or keep {name} on a local disk."
    )
