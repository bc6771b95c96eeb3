"""A varied, fixed set of prompts for teacher data, with a held-out split for evaluation."""

from __future__ import annotations

import random
import re
from functools import lru_cache
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "assets" / "prompts"
# Hand-written evaluation prompts (issue 11): no training run ever sees them.
EVAL_HANDWRITTEN = PROMPTS_DIR / "eval_handwritten.txt"
GENERAL = PROMPTS_DIR / "general.txt"

# Every HOLDOUT_EVERY-th prompt (after a fixed shuffle) is never trained on.
HOLDOUT_EVERY = 10
_SPLIT_SEED = 1234  # fixed, independent of --seed, so the held-out set never moves

_TOPICS = [
    "photosynthesis", "black holes", "the water cycle", "machine learning", "inflation",
    "the French Revolution", "vaccines", "climate change", "the internet", "DNA",
    "plate tectonics", "compound interest", "the Roman Empire", "electricity", "gravity",
    "recursion", "the immune system", "volcanoes", "democracy", "supply and demand",
    "the human heart", "solar panels", "quantum computing", "the printing press",
    "evolution", "sleep", "coffee", "the moon landing", "honeybees", "rainbows",
    "blockchain", "the stock market", "antibiotics", "the Great Wall of China", "jazz",
    "meditation", "nuclear energy", "the Renaissance", "ocean tides", "bread baking",
]
_THINGS = [
    "the sea", "autumn leaves", "a lonely robot", "the city at night", "a cup of tea",
    "mountains", "friendship", "the first snow", "a lost key", "the stars", "a small cat",
    "rain on a window", "an old library", "summer holidays", "a train journey", "time",
]
_ACTIVITIES = [
    "learning a new language", "staying productive at home", "running a marathon",
    "saving money", "writing a novel", "cooking for a family", "studying for exams",
    "public speaking", "starting a garden", "travelling on a budget", "sleeping better",
    "learning to code", "job interviews", "reducing stress", "keeping a plant alive",
]
_CODE_TASKS = [
    "reverses a string", "checks whether a number is prime", "computes the factorial of n",
    "finds the largest element in a list", "counts the words in a sentence",
    "merges two sorted lists", "returns the Fibonacci sequence up to n",
    "removes duplicates from a list", "checks whether a string is a palindrome",
    "sorts a list of dictionaries by a key", "reads a CSV file and sums a column",
    "converts Celsius to Fahrenheit", "implements binary search",
    "flattens a nested list", "counts vowels in a string",
]
_QUESTIONS = [
    "What is the capital of Australia?", "How many planets are in the solar system?",
    "Who wrote Romeo and Juliet?", "Why is the sky blue?", "What causes earthquakes?",
    "How does a refrigerator work?", "What is the difference between weather and climate?",
    "How do airplanes stay in the air?", "What is a prime number?",
    "Why do we have seasons?", "What is the speed of light?", "How do plants grow?",
    "What is the largest ocean on Earth?", "How does the heart pump blood?",
    "What is artificial intelligence?", "Why do leaves change colour in autumn?",
    "What is the boiling point of water?", "How are rainbows formed?",
    "What does a CPU do?", "Who painted the Mona Lisa?", "What is 15% of 80?",
    "If I have 3 apples and buy 5 more, how many do I have?",
    "What is the square root of 144?", "How many days are in a leap year?",
]
_CATEGORIES = [
    "fruits that are high in vitamin C", "famous scientists", "European capitals",
    "programming languages", "healthy breakfast ideas", "board games for families",
    "ways to save energy at home", "mammals that live in the ocean", "classic novels",
    "hobbies you can start today", "uses of a paperclip", "tips for a good night's sleep",
]
_ZH_TOPICS = [
    "光合作用", "人工智能", "长城", "月亮", "春节", "咖啡", "地球", "音乐", "友谊", "大海",
]
_FR_SENTENCES = [
    "The weather is beautiful today.", "I would like a cup of coffee, please.",
    "Where is the train station?", "My brother is learning to play the guitar.",
]

_INSTRUCTIONS = [
    "Explain {topic} in simple terms.", "What is {topic}?",
    "Give me a short summary of {topic}.", "Write a paragraph about {topic} for a child.",
    "What are three interesting facts about {topic}?", "Why is {topic} important?",
    "Write a short poem about {thing}.", "Write a haiku about {thing}.",
    "Tell me a short story about {thing}.", "Describe {thing} in three sentences.",
    "Give me three tips for {activity}.", "How do I get started with {activity}?",
    "What are the pros and cons of {activity}?",
    "Write a Python function that {code}.", "Write a JavaScript function that {code}.",
    "Explain how to write a program that {code}.",
    "List five {category}.", "Name a few {category}.",
    "{question}", "{question} Answer briefly.",
    "请用简单的话解释{zh}。", "写一首关于{zh}的短诗。", "告诉我三个关于{zh}的有趣事实。",
    "Translate into French: {fr}", "Write an email to a friend about {thing}.",
]
_RAW = [
    "Once upon a time, in a land far away,", "The history of {topic} begins",
    "def {fn}(", "# A short guide to {activity}\n\n", "Dear Sir or Madam,\n\nI am writing to",
    "In this article, we will discuss {topic}.", "Q: {question}\nA:",
    "Here is a list of {category}:\n1.", "import numpy as np\n\n",
    "It was a cold morning when", "Chapter 1\n\n",
]
_FNS = ["add", "fibonacci", "parse_line", "is_even", "main", "load_data", "mean"]


def _fill(template: str, rng: random.Random) -> str:
    return template.format(
        topic=rng.choice(_TOPICS), thing=rng.choice(_THINGS), activity=rng.choice(_ACTIVITIES),
        code=rng.choice(_CODE_TASKS), category=rng.choice(_CATEGORIES),
        question=rng.choice(_QUESTIONS), zh=rng.choice(_ZH_TOPICS), fr=rng.choice(_FR_SENTENCES),
        fn=rng.choice(_FNS),
    )


@lru_cache(maxsize=4)
def all_prompts(n_chat: int = 660, n_raw: int = 110) -> tuple[tuple[str, bool], ...]:
    """Deterministic (text, use_chat_template) prompts, distinct, in a fixed shuffled order."""
    rng = random.Random(_SPLIT_SEED)
    seen: set[tuple[str, bool]] = set()
    out: list[tuple[str, bool]] = []
    for pool, count, chat in ((_INSTRUCTIONS, n_chat, True), (_RAW, n_raw, False)):
        made, tries = 0, 0
        while made < count and tries < count * 50:
            tries += 1
            text = _fill(rng.choice(pool), rng)
            if (text, chat) in seen:
                continue
            seen.add((text, chat))
            out.append((text, chat))
            made += 1
    rng.shuffle(out)
    return tuple(out)


# Written by hand, outside every template above, and never trained on: a measure of how the
# draft does on the kind of prompt a user types, not only on unseen fillings of known templates.
FREE_PROMPTS = (
    "Explain speculative decoding in one paragraph.",
    "Write a limerick about a cat who learns to fly.",
    "What were the main causes of the First World War?",
    "Summarise the plot of Hamlet in a few sentences.",
    "My sourdough starter smells like nail polish. What should I do?",
    "Compare Python lists and tuples, with an example of each.",
    "Plan a three-day trip to Kyoto for someone who loves gardens.",
    "Why does ice float on water?",
    "Draft a polite message declining a meeting invitation.",
    "What is the difference between a virus and a bacterium?",
    "Give me a recipe for a quick vegetarian dinner.",
    "How does a hash table handle collisions?",
)


def free_prompts() -> list[tuple[str, bool]]:
    """Hand-written evaluation prompts (chat template), never used for training."""
    return [(text, True) for text in FREE_PROMPTS]


def train_prompts() -> list[tuple[str, bool]]:
    """Prompts used for teacher data."""
    return [p for i, p in enumerate(all_prompts()) if i % HOLDOUT_EVERY != 0]


def heldout_prompts() -> list[tuple[str, bool]]:
    """Prompts never used for training: for evaluation and the benchmark."""
    return [p for i, p in enumerate(all_prompts()) if i % HOLDOUT_EVERY == 0]


def read_lines(path: Path) -> list[str]:
    """Prompts of a text file, one per line; blank lines and '#' lines skipped."""
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def handwritten_prompts() -> list[tuple[str, bool]]:
    """The hand-written evaluation set of assets/prompts/eval_handwritten.txt (chat template)."""
    return [(text, True) for text in read_lines(EVAL_HANDWRITTEN)]


def evaluation_prompts() -> list[str]:
    """Every prompt an evaluation uses: no training prompt may equal or contain one."""
    return ([t for t, _ in handwritten_prompts()] + list(FREE_PROMPTS)
            + [t for t, _ in heldout_prompts()])


def prompt_key(text: str) -> str:
    """A prompt reduced for comparison: case, spacing and punctuation do not count."""
    return " ".join(re.findall(r"\w+", text.casefold()))


class EvalFilter:
    """Rejects a prompt that equals an evaluation prompt, or contains one, up to case and
    punctuation (a generated "Why does ice float on water? Be brief." is still that prompt)."""

    def __init__(self, evaluation: list[str] | None = None, min_contained: int = 12) -> None:
        keys = {prompt_key(t) for t in (evaluation_prompts() if evaluation is None
                                        else evaluation)}
        self.keys = frozenset(k for k in keys if k)
        self._contained = tuple(k for k in self.keys if len(k) >= min_contained)

    def allows(self, text: str) -> bool:
        """True when ``text`` is neither an evaluation prompt nor contains one."""
        key = prompt_key(text)
        if not key or key in self.keys:
            return False
        return not any(k in key for k in self._contained)
