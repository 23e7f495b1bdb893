"""What the text-model benchmarks share: the model by name, or the tiny random GPT-2 when it is unavailable (said once)."""


def load_text_lm(name):
    "The `TEXT_LMS` adapter for `name`; on a machine without it, tiny-gpt2 (random weights), with a line saying so."
    from acrb_nb.adapters.base import TEXT_LMS
    try: return TEXT_LMS.create(name)
    except (ModuleNotFoundError, FileNotFoundError) as e:
        print(f"! {name} unavailable ({e}); using tiny-gpt2 (random weights)")
        return TEXT_LMS.create("tiny-gpt2")
