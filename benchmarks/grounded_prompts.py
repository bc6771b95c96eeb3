"""Input-grounded prompts: a pasted paragraph or code snippet and a task that reuses its words.

Written for issue 12's benchmark (summarise or answer from 150-300 words; rewrite or extend a
snippet). Never used for training. Each is a chat message (the chat template is applied).
"""

from __future__ import annotations

_LIGHTHOUSE = """\
The Bell Rock Lighthouse stands eleven miles off the coast of Angus, in Scotland, on a \
reef that is covered by the sea for all but a few hours each day. Before it was built, the reef \
wrecked dozens of ships every winter, because sailors heading for the Firth of Tay could not \
see it at high tide. The engineer Robert Stevenson began work in 1807. His men could only work \
at low tide, so in the first summer they managed barely a few hundred hours on the rock itself, \
living the rest of the time on a floating barracks ship anchored nearby. Stevenson designed \
interlocking granite blocks, cut on the mainland at Arbroath and shipped out in calm weather, \
so that each course of stone was dovetailed into the one below. The light was first lit on \
1 February 1811. It used twenty-four oil lamps with silvered reflectors and a rotating frame \
that showed red and white flashes, so that sailors could tell it apart from other lights on the \
coast. More than two hundred years later it is the oldest surviving sea-washed lighthouse in \
the world, and it still guides ships today, although the keepers left in 1988 when the light \
was automated."""

_BEES = """Honey bees decide where to build a new nest by a process that looks surprisingly like \
a vote. In late spring, when a colony becomes crowded, the old queen leaves with about half of \
the workers and the swarm hangs from a branch while a few hundred older bees, called scouts, \
search the surrounding countryside. A scout that finds a promising cavity, such as a hollow \
tree, returns to the swarm and performs a waggle dance that points towards the site. The better \
the site, the longer and more enthusiastically she dances, and the more new scouts she recruits \
to go and inspect it. Scouts that visit a poor site dance less and soon stop. Over a day or two \
support for the best site grows while support for the others fades. When about fifteen scouts \
are present at the same site at the same time, they sense that a quorum has been reached and \
return to the swarm to produce a high-pitched piping signal. The piping tells the other bees \
to warm up their flight muscles, and within an hour the whole swarm takes off and flies to \
its new home, guided by the scouts that know the way."""

_LIBRARY = """Members of the Westfield Public Library may borrow up to twelve items at a time. \
Books and audiobooks can be kept for three weeks, while DVDs and video games must be returned \
after one week. Any item may be renewed twice, online or at the front desk, as long as no other \
member has placed a hold on it. Items that are returned late are charged a fine of twenty cents \
per day for books and one dollar per day for DVDs and video games, up to a maximum of ten \
dollars per item. Members under eighteen do not pay fines on books, but they do pay fines on \
DVDs and games. If an item is lost or damaged beyond repair, the member is charged the \
replacement cost plus a five dollar processing fee. Members who owe more than fifteen dollars \
cannot borrow new items until the balance is paid. The library is open from nine in the \
morning to eight in the evening on weekdays and from ten to five on Saturdays, and it is \
closed on Sundays and public holidays. The book drop outside the main entrance is open at \
all times, and items left there are checked in on the next working day."""

_VOLCANO = """Iceland sits on the Mid-Atlantic Ridge, the boundary where the North American and \
Eurasian plates are slowly moving apart at about two centimetres a year. As the plates separate, \
magma rises from the mantle to fill the gap, which is why the island has around thirty active \
volcanic systems. Iceland also lies above a hotspot, a plume of unusually hot rock rising from \
deep in the mantle, which supplies extra magma and explains why the island rises above the sea \
at all, when most of the ridge lies two kilometres under water. The combination produces very \
different eruptions. Fissure eruptions, such as the one at Holuhraun in 2014, pour out runny \
basalt lava from long cracks in the ground and can continue for months. Eruptions under \
glaciers, such as Eyjafjallajökull in 2010, are explosive instead, because the meeting of magma \
and meltwater shatters the lava into fine ash. That ash cloud closed much of European airspace \
for six days and stranded about ten million travellers. Icelanders make use of the same heat: \
geothermal power stations and district heating supply around nine out of ten homes."""

_MEETING = """Notes from the Harbour Street community garden meeting, held on Tuesday evening in \
the church hall. Twenty-three members attended. Maria Lopez, the treasurer, reported that the \
garden ended the year with a balance of 1,840 dollars, mostly from plot fees and the autumn \
plant sale. The committee agreed to spend up to 600 dollars on a new water tank, because the \
old one leaked all summer and the hose could not reach the plots at the far end. Tom Becker \
offered to collect three quotes and report back at the next meeting. There was a long \
discussion about the waiting list, which now has nineteen names on it. Members voted to split \
four of the largest plots into halves, so that eight more households can start gardening in \
the spring. Anyone who holds one of those plots will be asked first whether they agree, and \
will pay half the fee. The compost rota will continue as before, but members asked for a \
clearer sign explaining what can and cannot go into the bins, since plastic labels keep \
turning up in the compost. The next meeting will be held on the first Tuesday of March."""

_CHESS = """The Lewis chessmen are a group of ninety-three gaming pieces carved mostly from walrus \
ivory, with a few made from whale teeth. They were found in 1831 on the Isle of Lewis in the \
Outer Hebrides of Scotland, buried in a sand bank, and they were probably made in Norway in the \
late twelfth or early thirteenth century, when the islands were ruled by the kings of Norway. \
The pieces include kings, queens, bishops, knights, warders and pawns, enough for at least four \
nearly complete chess sets. Their faces are what make them famous: the queens rest their \
cheeks on their hands with worried expressions, and some of the warders, which stand in for \
the modern rooks, bite the tops of their shields like berserker warriors working themselves \
into a fury. Eighty-two of the pieces are now in the British Museum in London and the other \
eleven are in the National Museum of Scotland in Edinburgh. In 2019 a missing warder that a \
family had kept in a drawer for decades, unaware of what it was, was sold at auction for \
more than seven hundred thousand pounds."""

_PY_STATS = '''def summarize(values):
    total = 0
    count = 0
    smallest = None
    largest = None
    for value in values:
        total = total + value
        count = count + 1
        if smallest is None or value < smallest:
            smallest = value
        if largest is None or value > largest:
            largest = value
    mean = total / count
    return {"count": count, "mean": mean, "min": smallest, "max": largest}'''

_PY_INVENTORY = '''class Inventory:
    def __init__(self):
        self.items = {}

    def add_item(self, name, quantity, price):
        if name in self.items:
            self.items[name]["quantity"] += quantity
        else:
            self.items[name] = {"quantity": quantity, "price": price}

    def remove_item(self, name, quantity):
        if name not in self.items:
            raise KeyError(name)
        self.items[name]["quantity"] -= quantity

    def total_value(self):
        return sum(item["quantity"] * item["price"] for item in self.items.values())'''

_JS_FETCH = '''function loadUsers(callback) {
  fetch("/api/users")
    .then(function (response) {
      return response.json();
    })
    .then(function (users) {
      var names = [];
      for (var i = 0; i < users.length; i++) {
        if (users[i].active) {
          names.push(users[i].firstName + " " + users[i].lastName);
        }
      }
      callback(null, names);
    })
    .catch(function (error) {
      callback(error);
    });
}'''

_PY_CSV = '''import csv

def read_scores(path):
    scores = {}
    with open(path) as handle:
        reader = csv.DictReader(handle)
        for row in reader:
            student = row["student"]
            score = int(row["score"])
            if student not in scores:
                scores[student] = []
            scores[student].append(score)
    return scores'''

GROUNDED_PROMPTS: tuple[str, ...] = (
    f"Summarise the following text in three sentences.\n\n{_LIGHTHOUSE}",
    f"Read the text and answer: how do the scouts know that a decision has been made, and what "
    f"happens next?\n\n{_BEES}",
    f"Using only the rules below, answer: a 16-year-old returns two books 5 days late and one "
    f"DVD 3 days late. What do they owe, and why?\n\n{_LIBRARY}",
    f"Explain, using the text below, why some Icelandic eruptions are explosive and others are "
    f"not.\n\n{_VOLCANO}",
    f"Turn these meeting notes into a list of decisions and action items, with who is "
    f"responsible.\n\n{_MEETING}",
    f"Write a short museum label (about 60 words) for the Lewis chessmen, based on this text."
    f"\n\n{_CHESS}",
    f"Summarise this paragraph for a ten-year-old.\n\n{_BEES}",
    f"List the key facts in this text as bullet points.\n\n{_VOLCANO}",
    f"Rewrite this Python function to use the built-in functions sum, len, min and max, and "
    f"make it return None for an empty list.\n\n```python\n{_PY_STATS}\n```",
    f"Add a method `restock_report(self, threshold)` to this class that returns the names of "
    f"items whose quantity is below the threshold, and add docstrings.\n\n```python\n"
    f"{_PY_INVENTORY}\n```",
    f"Rewrite this JavaScript function using async/await and arrow functions, keeping the "
    f"same behaviour.\n\n```javascript\n{_JS_FETCH}\n```",
    f"Extend this function so that it also returns each student's average score, and add "
    f"type hints.\n\n```python\n{_PY_CSV}\n```",
)


def grounded_prompts() -> list[tuple[str, bool]]:
    """The input-grounded set, as (text, use chat template) pairs like the distill sets."""
    return [(text, True) for text in GROUNDED_PROMPTS]
