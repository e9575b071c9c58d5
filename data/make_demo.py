"""Write the demo corpus, data/demo/reviews.parquet: synthetic product reviews.

Why this exists: `make demo`, the tests and the notebooks need a corpus that behaves like the
ones users score, without shipping anybody's real data. So the reviews are built from phrase
banks, with sentiment that follows the rating, lengths from a few words to a long tail of
300-1,500-word essays, and, on purpose and in small numbers, the rows a pipeline has to survive:
null texts, empty or whitespace-only texts, exact duplicate texts (cache and dedup), unicode
(accents, emoji, Spanish, French, CJK) and exactly one text far over the service's 32k-token
context limit (a review with a router's system log pasted in).

Everything comes from one `random.Random(seed)`, consumed in a fixed order, so the same
arguments always give the same table: the committed file can be regenerated and diffed.

    python data/make_demo.py [--rows 3000] [--seed 7] [--out data/demo/reviews.parquet]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import itertools
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

DEFAULT_ROWS = 3000
DEFAULT_SEED = 7
DEFAULT_OUT = Path(__file__).resolve().parent / "demo" / "reviews.parquet"

SCHEMA = pa.schema(
    [
        ("review_id", pa.string()),
        ("product", pa.string()),
        ("category", pa.string()),
        ("rating", pa.int64()),
        ("verified", pa.bool_()),
        ("helpful_votes", pa.int64()),
        ("text", pa.string()),
    ]
)

Bank = dict[str, tuple[str, ...]]  # polarity ("pos", "neg", "mix", "neutral") -> sentences


@dataclass(frozen=True)
class Product:
    name: str
    noun: str
    aspects: tuple[str, ...]
    plural: bool = False


# --- products -------------------------------------------------------------------------------

PRODUCTS: dict[str, tuple[Product, ...]] = {
    "electronics": (
        Product(
            "Voltra X2 Wireless Earbuds",
            "earbuds",
            ("battery", "sound", "connectivity", "comfort", "setup"),
            plural=True,
        ),
        Product("Lumen 27-inch 4K Monitor", "monitor", ("display", "build", "setup", "ports")),
        Product("PowerCell 20000mAh Power Bank", "power bank", ("battery", "build", "ports")),
        Product("Arcwave Bluetooth Speaker", "speaker", ("battery", "sound", "connectivity")),
        Product("NetHaven AX3000 Mesh Router", "router", ("wifi", "setup", "build")),
        Product(
            "Kinetic Fit Band 5",
            "fitness tracker",
            ("battery", "display", "comfort", "connectivity", "app"),
        ),
        Product("Quillpad 10 E-Reader", "e-reader", ("battery", "display", "build", "setup")),
        Product("SnapLink USB-C Hub (7-in-1)", "hub", ("ports", "build", "setup")),
    ),
    "kitchen": (
        Product("Ferro 10-inch Cast Iron Skillet", "skillet", ("build", "cooking", "cleaning")),
        Product("BrewMaster Pour-Over Kettle", "kettle", ("build", "pour", "size")),
        Product(
            "Crisp&Co 5.8qt Air Fryer",
            "air fryer",
            ("cooking", "cleaning", "size", "instructions", "noise"),
        ),
        Product("Sable 8-inch Chef's Knife", "knife", ("sharpness", "build", "cleaning")),
        Product(
            "Nordvik Stainless Mixing Bowls (Set of 3)",
            "bowls",
            ("build", "cleaning", "size"),
            plural=True,
        ),
        Product("Pulse Pro Countertop Blender", "blender", ("blending", "noise", "cleaning")),
        Product("Aroma Burr Coffee Grinder", "grinder", ("grind", "noise", "cleaning", "build")),
    ),
    "books": (
        Product(
            "The Salt Road (paperback)",
            "book",
            ("plot", "characters", "writing", "pacing", "ending", "print"),
        ),
        Product("Quiet Engines: A History of Clockwork", "book", ("writing", "research", "print")),
        Product("Cooking for One, Vol. 2", "cookbook", ("recipes", "clarity", "print")),
        Product(
            "The Lighthouse Keeper's Daughter",
            "novel",
            ("plot", "characters", "writing", "pacing", "ending"),
        ),
        Product("Practical Statistics in 30 Days", "book", ("clarity", "writing", "print")),
        Product("Midnight at the Café Olé", "novel", ("plot", "characters", "writing", "ending")),
        Product(
            "Starfall Chronicles Box Set", "box set", ("plot", "characters", "pacing", "print")
        ),
    ),
    "outdoor": (
        Product("Ridgeline 2-Person Tent", "tent", ("weather", "pitching", "weight", "durability")),
        Product(
            "Trailhead 45L Backpack", "backpack", ("comfort", "durability", "weight", "weather")
        ),
        Product(
            "Summit Down Sleeping Bag (20°F)", "sleeping bag", ("warmth", "weight", "durability")
        ),
        Product("Cascade Water Filter Bottle", "bottle", ("filter", "durability", "weight")),
        Product("Emberlite Camp Stove", "stove", ("boil", "setup", "weight", "durability")),
        Product(
            "Trekker Carbon Hiking Poles",
            "poles",
            ("durability", "weight"),
            plural=True,
        ),
        Product("Sunshade Pop-up Beach Canopy", "canopy", ("pitching", "weather", "durability")),
    ),
    "toys": (
        Product(
            "Brickville Fire Station Building Set", "set", ("fun", "assembly", "age", "toughness")
        ),
        Product("Zoomer RC Monster Truck", "truck", ("fun", "toughness", "batteries", "age")),
        Product("Puzzle Planet 1000-Piece World Map", "puzzle", ("fun", "pieces", "age")),
        Product("Cuddle Cub Plush Bear", "bear", ("safety", "toughness", "fun")),
        Product("Mini Maker Science Kit", "kit", ("learning", "assembly", "age", "fun")),
        Product("Dino Dig Excavation Kit", "kit", ("fun", "learning", "age")),
        Product(
            "Wobble Stack Wooden Blocks",
            "blocks",
            ("safety", "toughness", "learning", "age"),
            plural=True,
        ),
    ),
    "beauty": (
        Product("Velvet Rose Hydrating Serum", "serum", ("scent", "texture", "skin")),
        Product(
            "Daily Shield SPF 50 Sunscreen", "sunscreen", ("texture", "finish", "skin", "scent")
        ),
        Product("Argan Gold Hair Oil", "hair oil", ("scent", "texture", "results")),
        Product("Matte Muse Liquid Lipstick", "lipstick", ("longevity", "shade", "wear")),
        Product("Clean Slate Foaming Cleanser", "cleanser", ("skin", "scent", "texture")),
        Product("Silk Touch Ionic Hair Dryer", "hair dryer", ("results", "noise", "build")),
    ),
    "grocery": (
        Product(
            "Highland Roast Whole Bean Coffee (2 lb)", "coffee", ("taste", "freshness", "packaging")
        ),
        Product("Sunny Acres Organic Granola", "granola", ("taste", "ingredients", "crunch")),
        Product("Fire & Lime Jalapeño Hot Sauce", "hot sauce", ("taste", "heat", "ingredients")),
        Product("Matcha Mori Ceremonial Green Tea", "tea", ("taste", "freshness", "packaging")),
        Product(
            "Nutty Buddy Almond Butter", "almond butter", ("taste", "consistency", "ingredients")
        ),
        Product(
            "Olé Tortilla Chips Variety Pack",
            "chips",
            ("taste", "freshness", "crunch", "packaging"),
            plural=True,
        ),
    ),
    "home": (
        Product("Oakline 5-Shelf Bookcase", "bookcase", ("assembly", "sturdiness", "looks")),
        Product("Cloudrest Memory Foam Pillow", "pillow", ("support", "smell", "size")),
        Product("Brightside LED Desk Lamp", "lamp", ("light", "looks", "sturdiness")),
        Product("PureAir HEPA Air Purifier", "air purifier", ("air", "noise", "size")),
        Product(
            "Linen Loft Blackout Curtains", "curtains", ("blackout", "looks", "size"), plural=True
        ),
        Product("Robo Sweep S7 Robot Vacuum", "vacuum", ("suction", "navigation", "noise", "app")),
    ),
}

CATEGORY_WEIGHTS = {
    "electronics": 24,
    "kitchen": 15,
    "books": 14,
    "outdoor": 10,
    "toys": 10,
    "beauty": 11,
    "grocery": 8,
    "home": 8,
}

PRICE_RANGE = {
    "electronics": (19, 349),
    "kitchen": (15, 189),
    "books": (9, 45),
    "outdoor": (19, 299),
    "toys": (12, 89),
    "beauty": (9, 129),
    "grocery": (6, 39),
    "home": (25, 399),
}

COMPETITORS = {
    "electronics": (
        "my old Anker",
        "the Sony I had before",
        "the Samsung one",
        "the one I borrowed from work",
        "the cheap no-name one I had before",
        "my previous Logitech",
    ),
    "kitchen": (
        "the Cuisinart I had before",
        "my mom's old one",
        "the cheap one from the supermarket",
        "the name-brand one at my sister's",
        "the one I got as a wedding present",
    ),
    "books": (
        "the author's first book",
        "the TV adaptation",
        "anything else I read this year",
        "the hardcover edition",
        "the audiobook version",
    ),
    "outdoor": (
        "my old REI gear",
        "the Coleman one I had",
        "my friend's much pricier one",
        "the cheaper Ozark Trail version",
        "the one I rented last year",
    ),
    "toys": (
        "the name-brand version",
        "the version at his daycare",
        "the toys she already has",
        "the Melissa & Doug one",
        "the cheaper knockoff we tried first",
    ),
    "beauty": (
        "my usual drugstore brand",
        "the Sephora version",
        "the brand I used before",
        "what my dermatologist recommended",
        "the fancy one my sister uses",
    ),
    "grocery": (
        "the store brand",
        "what I get at Trader Joe's",
        "the supermarket version",
        "the brand I used to buy",
        "the local shop's stuff",
    ),
    "home": (
        "the IKEA one I had before",
        "the one from Target",
        "the cheaper Wayfair version",
        "what we had in our old place",
        "the brand my parents swear by",
    ),
}

CONTEXTS = {
    "electronics": (
        "I use {obj} every day, at home and on the road.",
        "Bought {this} for working from home.",
        "I mainly use {obj} for video calls and the occasional movie.",
        "Got {obj} for a long-haul flight to {city}.",
        "{Sub} {is} used every day in our small apartment.",
    ),
    "kitchen": (
        "I cook for a family of four most nights.",
        "Bought {this} after my old one finally gave up.",
        "I use {obj} almost every morning.",
        "Got {this} as a housewarming gift for {person}.",
        "I mostly use {obj} on weekends for bigger batches.",
    ),
    "books": (
        "I read this for my book club.",
        "Picked it up at the airport in {city}.",
        "Bought this as a gift for {person}, then read it myself first.",
        "I read it over {days} evenings.",
        "It was assigned reading for a night class.",
    ),
    "outdoor": (
        "I used {obj} on a {days}-day backpacking trip in the Sierras.",
        "Took {obj} car camping with the kids.",
        "Mostly weekend hikes, some of them in heavy rain.",
        "Used {obj} at the beach almost every weekend this summer.",
        "Bought {this} for a trip to Patagonia.",
    ),
    "toys": (
        "Bought {this} for {person}'s birthday.",
        "Christmas present for my nephew, who is {age}.",
        "We got {this} as a rainy-day activity.",
        "My kids ({age} and {age2}) play with {obj} together.",
        "Grandma bought {this} for our {age}-year-old.",
    ),
    "beauty": (
        "I have combination, acne-prone skin.",
        "I have very dry, sensitive skin.",
        "I use {obj} morning and night.",
        "I have thick, curly hair that frizzes if you look at it wrong.",
        "Bought {this} after a recommendation in a TikTok video.",
    ),
    "grocery": (
        "We go through a bag a week in this house.",
        "I have it every morning before work.",
        "Bought {this} for a party.",
        "It's part of my monthly subscription order.",
        "I'm gluten-free so I read labels carefully.",
    ),
    "home": (
        "We have a small apartment with two cats.",
        "Bought {this} for my home office.",
        "Put {obj} in the kids' room.",
        "We moved into a new house last month.",
        "Got {this} for a rental property.",
    ),
}

# --- aspects: what reviewers talk about, by polarity ------------------------------------------

ASPECTS: dict[str, Bank] = {
    "battery": {
        "pos": (
            "Battery life is excellent; I get about {hours} hours on a charge.",
            "The battery easily lasts a full work day, sometimes two.",
            "{Sub} charge{s} quickly and hold{s} a charge for days when I'm not using {obj}.",
            "I was worried about the battery after reading other reviews, but mine has been solid.",
            "Went on a {days}-day trip and only charged {obj} once.",
            "On a {hours}-hour flight to {city} I used {obj} the whole way and still had {pct}% "
            "left.",
        ),
        "neg": (
            "The battery is a joke. I barely get {few} hours out of {obj}.",
            "After {weeks} weeks the battery started dying at around {pct}% without warning.",
            "{Sub} drain{s} even when switched off, so {sub} {is} always dead when I need {obj}.",
            "Battery life is nowhere near the advertised number.",
            "Charging takes forever and {the} get{s} uncomfortably warm.",
            "On a trip to {city} {sub} died after about {hours} hours, half of what's advertised.",
        ),
        "mix": (
            "Battery life is fine for normal use but drops fast if you push {obj}.",
            "The battery is okay, not great; roughly {hours} hours in real use.",
        ),
    },
    "sound": {
        "pos": (
            "The sound is rich and clear, with more bass than I expected at this size.",
            "Vocals are crisp and nothing distorts even at high volume.",
            "I listen to a lot of jazz and the detail is honestly impressive.",
            "Podcasts, calls, music: everything sounds great.",
        ),
        "neg": (
            "The sound is tinny and the bass is basically nonexistent.",
            "There's a constant hiss in quiet passages that drives me crazy.",
            "Anything above half volume distorts badly.",
            "People on calls say I sound like I'm in a tunnel.",
        ),
        "mix": (
            "Sound is good for the price, but audiophiles will want more.",
            "Great for podcasts, a bit muddy for music.",
        ),
    },
    "connectivity": {
        "pos": (
            "Pairing took about five seconds and {sub} reconnect{s} automatically every time.",
            "The Bluetooth connection is rock solid, even two rooms away.",
            "Switching between my phone and laptop is seamless.",
            "Not a single dropout in {dur} of use.",
        ),
        "neg": (
            "{Sub} disconnect{s} constantly, sometimes {n} times an hour.",
            "The connection drops whenever my phone is in my back pocket.",
            "After the last firmware update {sub} won't stay paired for more than an hour.",
            "I re-paired {obj} {n} times in one evening trying to get a stable connection.",
            "On {weekday} {sub} dropped out {n} times during a single meeting.",
        ),
        "mix": (
            "The connection is stable at home but flaky on the train.",
            "Pairing is fiddly the first time, fine after that.",
        ),
    },
    "comfort": {
        "pos": (
            "So comfortable I forget I'm wearing {obj}.",
            "{Sub} fit{s} well and stay{s} put, even on long runs.",
            "I've worn {obj} for {hours} hours straight without any soreness.",
            "Nothing rubs or pinches, even on long days.",
        ),
        "neg": (
            "After an hour {sub} start{s} to hurt.",
            "{Sub} dig{s} in no matter how I adjust {obj}.",
            "I get sore spots after an hour or so.",
            "Way too stiff; not comfortable for more than half an hour.",
        ),
        "mix": (
            "Comfortable enough for short sessions, less so after a couple of hours.",
            "Took about a week to get used to, but now {sub} {is} fine.",
        ),
    },
    "setup": {
        "pos": (
            "Setup took less than ten minutes, app included.",
            "Setup was painless, even for someone who hates tech.",
            "Everything was ready to go straight out of the box.",
            "I had {obj} up and running before my coffee got cold.",
        ),
        "neg": (
            "Setup was a nightmare; the app kept crashing at the last step.",
            "It took me {hours} hours and two phone calls to get {obj} working.",
            "You have to create an account and agree to three privacy policies just to start.",
            "The instructions are one tiny diagram with no words.",
        ),
        "mix": (
            "Setup was a little confusing, but the online video helped.",
            "Getting started took longer than it should, though everything works now.",
        ),
    },
    "display": {
        "pos": (
            "The screen is sharp, bright and easy to read even in direct sunlight.",
            "No dead pixels and the brightness is even across the whole screen.",
            "Text is crisp and there's no visible flicker.",
            "I read on {obj} for hours at night without eye strain.",
        ),
        "neg": (
            "There's noticeable backlight bleed in the corners.",
            "My unit arrived with {n} dead pixels right in the middle of the screen.",
            "The screen is dim and washes out completely outdoors.",
            "There's ghosting whenever anything moves quickly.",
        ),
        "mix": (
            "The display is good, though the colors run a little cool.",
            "Sharp screen, but the auto-brightness is too aggressive.",
        ),
    },
    "build": {
        "pos": (
            "Build quality is excellent; {sub} feel{s} solid and well made.",
            "{Sub} feel{s} heavier and more premium than the price suggests.",
            "After {dur} of daily use {sub} still look{s} brand new.",
            "I dropped {obj} from counter height and there's not even a scratch.",
        ),
        "neg": (
            "Build quality is flimsy for the price.",
            "The finish started peeling after {weeks} weeks.",
            "A piece snapped off the first time I used {obj}.",
            "{Sub} feel{s} cheap, like a knockoff of the real thing.",
        ),
        "mix": (
            "Feels sturdy, though the finish scratches easily.",
            "Build quality is decent, not great for the price.",
        ),
    },
    "ports": {
        "pos": (
            "Every port works as advertised, including pass-through charging.",
            "Plenty of ports, and all of them work at full speed.",
            "Charging two devices at once is no problem.",
        ),
        "neg": (
            "One of the ports stopped working after {weeks} weeks.",
            "Things randomly disconnect unless I unplug and replug everything.",
            "Only one port runs at full speed, which the listing doesn't say.",
        ),
        "mix": ("The ports work, but they're packed so tight that wide plugs block each other.",),
    },
    "app": {
        "pos": (
            "The app is clean and actually useful, no ads or nagging.",
            "Scheduling in the app works perfectly.",
            "The app shows clear graphs and history.",
        ),
        "neg": (
            "The app is buggy and logs me out every other day.",
            "Half of the features are locked behind a subscription.",
            "The app needs location access for no reason I can see.",
        ),
        "mix": ("The app does the job but looks like it was designed in 2012.",),
    },
    "cooking": {
        "pos": (
            "{Sub} heat{s} up fast and evenly; no more burnt middles.",
            "Last {weekday} I cooked dinner for {n} people and {the} handled it perfectly.",
            "Food comes out crispy on the outside and juicy inside.",
            "{Person} made jalapeño cornbread with {obj} and it came out great.",
        ),
        "neg": (
            "{Sub} heat{s} unevenly, so one side burns while the other is still raw.",
            "On {weekday} {sub} started giving off a burning smell after {mins} minutes.",
            "It takes forever to get up to temperature.",
            "I was hosting {n} people for dinner and {the} chose that night to stop working.",
        ),
        "mix": (
            "Cooks well once it's hot, but preheating takes a while.",
            "Great for small batches, uneven for big ones.",
        ),
    },
    "cleaning": {
        "pos": (
            "Cleanup is a breeze; everything wipes off with a paper towel.",
            "I've put {obj} through the dishwasher at least {n} times with no issues.",
            "Nothing sticks, so cleaning takes a minute.",
        ),
        "neg": (
            "Cleaning {obj} is a pain; food gets stuck in every corner.",
            "{Sub} {is}n't actually dishwasher safe, whatever the listing says.",
            "There's a gap where grease collects and you can't reach it.",
        ),
        "mix": ("Mostly easy to clean, except for one awkward corner.",),
    },
    "size": {
        "pos": (
            "The size is just right for our place.",
            "Compact, and {sub} {is} still big enough for what I need.",
            "Fits exactly where I wanted {obj} to go.",
        ),
        "neg": (
            "Much smaller than {sub} look{s} in the photos.",
            "{Sub} {is} bigger than expected and take{s} up a lot of space.",
            "The dimensions in the listing are wrong.",
        ),
        "mix": ("A bit bigger than I expected, but I made {obj} work.",),
    },
    "instructions": {
        "pos": (
            "The manual is clear and has a handy cooking-times chart.",
            "The included recipe booklet is actually good.",
        ),
        "neg": (
            "The instructions are badly translated and skip important steps.",
            "The manual contradicts itself about the timings.",
        ),
    },
    "noise": {
        "pos": (
            "{Sub} {is} surprisingly quiet; I can run {obj} while the baby naps.",
            "Much quieter than {competitor}.",
            "On the lowest setting you can barely hear {obj}.",
        ),
        "neg": (
            "{Sub} {is} loud enough to wake the whole house.",
            "There's a high-pitched whine that never goes away.",
            "It rattles like an old washing machine.",
        ),
        "mix": ("A bit loud on the top setting, fine otherwise.",),
    },
    "sharpness": {
        "pos": (
            "Razor sharp out of the box; it goes through tomatoes like butter.",
            "Still holds an edge after {dur} of daily prep.",
            "The balance is perfect and my cuts are finally even.",
        ),
        "neg": (
            "Dull within {weeks} weeks, even with careful hand washing.",
            "The edge chipped the first time I cut squash.",
            "Came with a burr along the blade; had to sharpen {obj} immediately.",
        ),
        "mix": ("Sharp enough, but it needs honing more often than I'd like.",),
    },
    "blending": {
        "pos": (
            "Crushes ice in seconds and my smoothies are perfectly smooth.",
            "Handles frozen fruit and nut butters without struggling.",
            "Made a piña colada for {n} people in one go, no chunks.",
        ),
        "neg": (
            "Leaves chunks of frozen fruit no matter how long I blend.",
            "The motor smells hot after {mins} seconds of anything thick.",
            "The jar leaks from the base.",
        ),
        "mix": ("Great for smoothies, not powerful enough for nut butter.",),
    },
    "grind": {
        "pos": (
            "The grind is consistent from espresso fine to French-press coarse.",
            "My pour-over tastes noticeably better since switching.",
            "Very little static or mess on the counter.",
        ),
        "neg": (
            "The grind is all over the place; half powder, half boulders.",
            "Coffee grounds spray everywhere from static.",
            "The finest setting isn't fine enough for espresso.",
        ),
        "mix": ("Consistent at medium settings, less so at the extremes.",),
    },
    "plot": {
        "pos": (
            "The plot kept me guessing until the last chapter.",
            "I stayed up until 2am on a {weekday} to finish it.",
            "Twisty, clever and never predictable.",
            "Read it on a train to {city} and missed my stop.",
        ),
        "neg": (
            "The plot is predictable; I guessed the twist by chapter three.",
            "Nothing happens for the first 200 pages.",
            "Too many subplots that go nowhere.",
            "I gave up on page {page}.",
        ),
        "mix": (
            "The premise is great, the execution less so.",
            "A strong start that loses its way in the middle.",
        ),
    },
    "characters": {
        "pos": (
            "The characters feel like real people; I miss them already.",
            "The narrator's voice is unforgettable.",
            "Even the side characters get real depth.",
        ),
        "neg": (
            "I couldn't care less about any of the characters.",
            "The main character makes the same stupid decision over and over.",
            "The dialogue is wooden and everyone sounds the same.",
        ),
        "mix": ("Great lead character, forgettable supporting cast.",),
    },
    "writing": {
        "pos": (
            "The prose is beautiful without being showy.",
            "Some sentences I had to read twice just to enjoy them again.",
            "Clear, witty and easy to read.",
        ),
        "neg": (
            "The writing is clunky and repetitive.",
            "It badly needed an editor; there are typos on almost every page.",
            "Purple prose everywhere.",
        ),
        "mix": ("The writing is good but a bit overwrought in places.",),
    },
    "pacing": {
        "pos": (
            "The pacing is perfect; every chapter ends on a hook.",
            "It flies by; I read it in a weekend.",
        ),
        "neg": (
            "The pacing is glacial.",
            "Took me {weeks} weeks to slog through it.",
            "The ending feels rushed after all that build-up.",
        ),
        "mix": ("Slow start, but it picks up after the first hundred pages.",),
    },
    "ending": {
        "pos": (
            "The ending is perfect and earned.",
            "That last chapter made me cry on the bus.",
        ),
        "neg": (
            "The ending made me want to throw it across the room.",
            "It just stops, like the author ran out of time.",
        ),
        "mix": ("The ending is divisive; I'm still not sure how I feel about it.",),
    },
    "print": {
        "pos": (
            "The print quality is lovely and the cover is gorgeous.",
            "Nice thick paper and the binding lies flat.",
        ),
        "neg": (
            "The print is tiny and faint, like a bad photocopy.",
            "Pages {page} to {page2} were missing from my copy.",
            "The spine cracked the first time I opened it.",
        ),
        "mix": ("Good paper, but the font is very small.",),
    },
    "research": {
        "pos": (
            "Meticulously researched, with great notes and sources.",
            "You can tell the author spent years in the archives.",
        ),
        "neg": (
            "Several facts are just wrong; a quick search would have caught them.",
            "The sources are thin and mostly secondhand.",
        ),
    },
    "recipes": {
        "pos": (
            "Every recipe I've tried has worked the first time.",
            "The crème brûlée recipe alone is worth the price.",
            "Great for using up leftovers without waste.",
        ),
        "neg": (
            "The quantities are off in at least {n} recipes.",
            "Half the recipes need ingredients I can't find anywhere.",
            "Most of these recipes are online for free.",
        ),
        "mix": ("Some great recipes, some duds.",),
    },
    "clarity": {
        "pos": (
            "Explains things clearly without dumbing them down.",
            "The worked examples finally made it click for me.",
        ),
        "neg": (
            "Confusing explanations and errors in the examples.",
            "Assumes a lot of background it never explains.",
        ),
        "mix": ("Clear in the early chapters, much harder to follow later.",),
    },
    "weather": {
        "pos": (
            "We had a thunderstorm on night {n} and everything stayed dry.",
            "Survived a windy weekend on the coast near {city} without any drama.",
            "Fully waterproof; rain just beads off.",
        ),
        "neg": (
            "Everything got soaked in the first real rain.",
            "The seams leak in anything more than light rain.",
            "It nearly blew away in a moderate breeze.",
        ),
        "mix": ("Handles light rain fine, but I wouldn't trust it in a real storm.",),
    },
    "weight": {
        "pos": (
            "Light enough that I barely notice {obj} in my pack.",
            "Hiked {miles} miles on a hot {weekday} and barely noticed the weight.",
        ),
        "neg": (
            "Heavier than advertised, by almost a pound.",
            "Too heavy for anything but car camping.",
        ),
        "mix": ("A bit heavy, but you get durability for that weight.",),
    },
    "durability": {
        "pos": (
            "Tough as nails; {sub} {has} been through {n} trips and still look{s} new.",
            "The materials feel like they'll last for years.",
            "Survived {person}, two dogs and a muddy festival, which is saying something.",
        ),
        "neg": (
            "Something gave out on day {days} of a two-week trip.",
            "The zipper broke on the second day and we had to use duct tape.",
            "Broke within {days} days of normal use.",
            "Started falling apart after {n} outings.",
        ),
        "mix": ("Decent durability, though {sub} show{s} some wear already.",),
    },
    "warmth": {
        "pos": (
            "Temperatures dropped to around {temp}°F and I was perfectly comfortable.",
            "Warm and cozy without being sweaty.",
        ),
        "neg": (
            "At {temp}°F I was shivering all night.",
            "Nowhere near the advertised temperature rating.",
        ),
        "mix": ("Warm enough down to the 40s; I wouldn't push it further.",),
    },
    "filter": {
        "pos": (
            "The water tastes clean, even from a murky stream.",
            "The filter flows fast and it's easy to drink from.",
        ),
        "neg": (
            "You have to suck so hard it gives you a headache.",
            "The water still tastes like plastic after {n} washes.",
        ),
    },
    "boil": {
        "pos": (
            "Boils a liter of water in about three minutes, even at altitude.",
            "Simmer control is surprisingly good for a backpacking stove.",
        ),
        "neg": (
            "The flame goes out in the slightest wind.",
            "Took {mins} minutes to boil water at camp.",
        ),
    },
    "fun": {
        "pos": (
            "The kids haven't put {obj} down since it arrived.",
            "Hours of fun; even the adults got involved.",
            "{Person} played with {obj} all afternoon and asked for more.",
        ),
        "neg": (
            "Boring; {sub} {was} forgotten within a day.",
            "Way less fun than the video suggests.",
            "{Person} played with {obj} for ten minutes and went back to the tablet.",
        ),
        "mix": ("Fun at first, but the novelty wore off after a week.",),
    },
    "assembly": {
        "pos": (
            "Assembly was straightforward and the instructions were clear.",
            "Took about {mins} minutes to put together, with every piece labeled.",
        ),
        "neg": (
            "Assembly took {hours} hours and two pieces were missing.",
            "Some of the parts don't line up, so I had to improvise.",
            "The instructions skip steps and use tiny, unreadable diagrams.",
        ),
        "mix": ("Assembly was tedious but doable with two people.",),
    },
    "age": {
        "pos": (
            "Perfect for the recommended age range.",
            "Just challenging enough for a {age}-year-old.",
        ),
        "neg": (
            "Far too hard for the age on the box.",
            "Too babyish for anyone over {age}.",
        ),
        "mix": ("A bit advanced for the stated age, but fine with a grown-up helping.",),
    },
    "batteries": {
        "pos": ("The rechargeable battery lasts a good {mins} minutes of play.",),
        "neg": (
            "Eats batteries; we went through a whole pack in a weekend.",
            "The battery lasts about ten minutes and takes three hours to charge.",
        ),
    },
    "safety": {
        "pos": (
            "No small parts, no sharp edges, nothing that comes loose.",
            "Well made and safe for a toddler.",
        ),
        "neg": (
            "Something came loose within a day; that's a choking hazard.",
            "Rough edges on a toy meant for toddlers.",
        ),
    },
    "learning": {
        "pos": (
            "Genuinely educational without feeling like homework.",
            "{Person} now explains volcanoes to anyone who will listen.",
        ),
        "neg": (
            "The 'science' is mostly just mixing colored water.",
            "Very little to learn once the novelty is gone.",
        ),
    },
    "pieces": {
        "pos": (
            "Thick pieces that snap together satisfyingly, with no duplicates.",
            "Great image quality and no puzzle dust.",
        ),
        "neg": (
            "Flimsy pieces that peel, and {n} were missing.",
            "Several pieces fit in multiple places, which is maddening.",
        ),
    },
    "scent": {
        "pos": (
            "Smells lovely, light and not overpowering.",
            "The scent is subtle and fades quickly, which I prefer.",
        ),
        "neg": (
            "The fragrance is overwhelming and gave me a headache.",
            "Smells like cheap perfume and plastic.",
        ),
        "mix": ("The scent is a bit strong at first but fades.",),
    },
    "texture": {
        "pos": (
            "Absorbs quickly with no greasy residue.",
            "Silky, lightweight texture.",
            "A little goes a long way, so the bottle lasts ages.",
        ),
        "neg": (
            "Sticky and greasy; it never fully sinks in.",
            "Too thick and hard to spread.",
            "Feels heavy and waxy.",
        ),
        "mix": ("Nice texture, but it takes a while to absorb.",),
    },
    "skin": {
        "pos": (
            "No breakouts, and my skin feels softer after {weeks} weeks.",
            "Gentle enough for my sensitive skin.",
            "Finally something that doesn't sting around my eyes.",
        ),
        "neg": (
            "Broke me out within {days} days.",
            "Burned and left red patches on my cheeks.",
            "Made my skin feel tight and dry.",
        ),
        "mix": ("My skin is fine with it, but I don't see much difference either.",),
    },
    "results": {
        "pos": (
            "Visible results within {weeks} weeks.",
            "My hair has never been this smooth.",
            "Noticeably less frizz, even on humid days.",
        ),
        "neg": (
            "No difference at all after {weeks} weeks.",
            "Made my hair look greasy by noon.",
        ),
        "mix": ("Subtle results; worth it only if you're patient.",),
    },
    "longevity": {
        "pos": (
            "Lasts all day, through coffee and lunch.",
            "Still perfect after a {hours}-hour shift.",
        ),
        "neg": (
            "Wears off within two hours and flakes at the edges.",
            "Transfers onto everything.",
        ),
    },
    "wear": {
        "pos": ("Comfortable to wear and not drying at all.", "Feels weightless on the lips."),
        "neg": ("Dries my lips out and cracks by midday.", "Feels sticky and heavy all day."),
        "mix": ("Comfortable for a few hours, then a little drying.",),
    },
    "shade": {
        "pos": ("The shade is exactly as pictured and flatters every skin tone I've seen it on.",),
        "neg": ("The shade looks nothing like the swatch; it's much more orange.",),
        "mix": ("Pretty shade, just darker than the photo.",),
    },
    "taste": {
        "pos": (
            "Tastes amazing; rich and not too sweet.",
            "Smooth, chocolatey and not bitter at all.",
            "The flavor is bright and fresh.",
            "{Person} finished the first one in two days.",
        ),
        "neg": (
            "Tastes stale and bitter.",
            "Way too sweet, like candy pretending to be healthy.",
            "There's a strange chemical aftertaste.",
        ),
        "mix": ("Good flavor, if a little too salty for my taste.",),
    },
    "freshness": {
        "pos": (
            "Arrived fresh, well within the best-before date.",
            "Everything tasted fresh, like it had just been packed.",
        ),
        "neg": (
            "Arrived stale, with a best-before date only {days} days away.",
            "The bag was already open and the contents were stale.",
        ),
    },
    "packaging": {
        "pos": (
            "Resealable bag that actually stays sealed.",
            "Packaging is minimal and recyclable, which I appreciate.",
        ),
        "neg": (
            "The bag split open in transit and the contents were everywhere.",
            "So much plastic packaging for so little product.",
        ),
    },
    "ingredients": {
        "pos": (
            "Short ingredient list, no junk.",
            "Finally one without added sugar or palm oil.",
        ),
        "neg": (
            "They quietly changed the recipe; it now has added sugar.",
            "The label says gluten-free but the fine print says 'may contain wheat'.",
        ),
    },
    "heat": {
        "pos": ("Just the right heat: a real kick without burning your face off.",),
        "neg": ("Barely spicy; I could drink it.",),
        "mix": ("Hotter than I expected; great flavor if you can handle it.",),
    },
    "sturdiness": {
        "pos": (
            "Solid and stable; no wobbling even when bumped.",
            "Heavier and sturdier than I expected at this price.",
        ),
        "neg": (
            "Wobbles like crazy on a perfectly flat floor.",
            "One of the joints split at a screw within a month.",
        ),
        "mix": ("Sturdy enough once properly tightened, wobbly before that.",),
    },
    "looks": {
        "pos": (
            "Look{s} much more expensive than {sub} {is}.",
            "The color matches our room perfectly.",
        ),
        "neg": (
            "The color is nothing like the photos.",
            "Looks cheap up close.",
        ),
        "mix": ("Looks nice from a distance; less so up close.",),
    },
    "smell": {
        "pos": ("No chemical smell at all out of the package.",),
        "neg": ("It smelled like a tire factory for {weeks} weeks.",),
        "mix": ("There was a smell at first, but it faded after a couple of days.",),
    },
    "light": {
        "pos": (
            "Bright, even light with no flicker, and the color temperature is adjustable.",
            "The warm setting is perfect for reading at night.",
        ),
        "neg": (
            "Flickers at low brightness, which gives me headaches.",
            "Not bright enough to light a desk properly.",
        ),
    },
    "blackout": {
        "pos": (
            "They really do block all the light; I sleep until noon now.",
            "The room is pitch black even at midday.",
        ),
        "neg": (
            "Light comes through the fabric, so they're not blackout at all.",
            "Light leaks around every edge.",
        ),
    },
    "wifi": {
        "pos": (
            "Coverage reaches the garage and the back yard now, which no router managed before.",
            "Speeds are close to what I pay for in every room.",
            "Not a single dropout since I set {obj} up, with {n} people streaming at once.",
            "Video calls from the upstairs office are finally smooth.",
        ),
        "neg": (
            "The Wi-Fi drops every evening around dinner time, like clockwork.",
            "Speeds upstairs are worse than with my old single router.",
            "Devices keep jumping between nodes and losing the connection.",
            "I reset {obj} {n} times in one evening trying to get a stable connection.",
            "On {weekday} the whole network went down {n} times during a single meeting.",
        ),
        "mix": (
            "Coverage is great, but speeds drop a lot on the far node.",
            "Stable most days, with a mysterious outage every week or so.",
        ),
    },
    "pour": {
        "pos": (
            "The gooseneck gives a slow, precise pour; my pour-over has never been better.",
            "Heats up fast and the built-in thermometer is accurate.",
        ),
        "neg": (
            "It dribbles down the side every time I pour.",
            "The thermometer reads about ten degrees off.",
        ),
        "mix": ("Nice pour, but the handle gets hot.",),
    },
    "toughness": {
        "pos": (
            "Survived being thrown down the stairs more than once.",
            "Still in one piece after {dur} with two very rough kids.",
            "Sturdy enough for a toddler who chews everything.",
        ),
        "neg": (
            "Broke within {days} days of normal play.",
            "The paint chips off if you look at it wrong.",
            "A piece snapped off on the first day and there's no way to fix it.",
        ),
        "mix": ("Holds up okay, but a couple of pieces are already loose.",),
    },
    "pitching": {
        "pos": (
            "Set up in about {few} minutes on my own, first try.",
            "Color-coded poles make setup foolproof, even in the dark.",
        ),
        "neg": (
            "Took two of us {mins} minutes and a lot of arguing to set {obj} up.",
            "Getting {obj} back into the bag is impossible.",
        ),
        "mix": ("Setup is easy once you've done it once; the first time was rough.",),
    },
    "finish": {
        "pos": (
            "No white cast at all, even on my darker skin.",
            "Sits nicely under makeup with no pilling.",
        ),
        "neg": (
            "Leaves a white cast that makes me look like a ghost.",
            "Pills terribly under makeup.",
        ),
        "mix": ("Slight cast at first that fades after a few minutes.",),
    },
    "crunch": {
        "pos": (
            "Perfect crunch, and {sub} stay{s} crunchy in milk.",
            "Crispy and not greasy at all.",
        ),
        "neg": (
            "Soft and chewy, like the bag had been open for a week.",
            "Half the bag was crumbs.",
        ),
    },
    "consistency": {
        "pos": ("Smooth and creamy, easy to spread straight from the fridge.",),
        "neg": ("A solid brick under an inch of oil; stirring it is a workout.",),
        "mix": ("Good consistency once stirred, but the oil separates fast.",),
    },
    "support": {
        "pos": (
            "Perfect firmness; my neck pain is mostly gone after {weeks} weeks.",
            "Keeps its shape through the night and sleeps cool.",
        ),
        "neg": (
            "Flattened out within {weeks} weeks.",
            "Way too firm; I wake up with a stiff neck every morning.",
            "Sleeps hot, even with the fan on.",
        ),
        "mix": ("Comfortable for back sleeping, too high for side sleeping.",),
    },
    "air": {
        "pos": (
            "The difference was noticeable within a day; my allergies are much better.",
            "The air quality sensor reacts within seconds when I cook.",
            "Dust on the shelves is way down.",
        ),
        "neg": (
            "The air quality readings never change, no matter the setting.",
            "Replacement filters cost almost as much as the unit.",
            "I can't tell any difference, even on the highest setting.",
        ),
        "mix": ("Seems to help in one room, not enough for an open-plan space.",),
    },
    "suction": {
        "pos": (
            "Picks up cat hair from carpets better than {competitor}.",
            "The bin is full of dust I didn't know we had after every run.",
        ),
        "neg": (
            "Barely picks anything up from rugs.",
            "Scatters crumbs around instead of picking them up.",
        ),
        "mix": ("Works well on hard floors, struggles with thick rugs.",),
    },
    "navigation": {
        "pos": (
            "Maps the whole floor on the first run and never gets lost.",
            "Runs on a schedule and the floors are clean when I get home.",
        ),
        "neg": (
            "Gets stuck under the couch every single day.",
            "Misses entire rooms and bumps into the same chair for ten minutes.",
        ),
        "mix": ("Smart navigation most days, but it still eats the occasional sock.",),
    },
}

ASPECT_LABELS = {
    "battery": "battery life",
    "sound": "sound quality",
    "connectivity": "the connection",
    "wifi": "the Wi-Fi",
    "display": "the screen",
    "build": "build quality",
    "ports": "the ports",
    "cooking": "heating",
    "cleaning": "cleanup",
    "pour": "the pour",
    "sharpness": "the edge",
    "blending": "blending power",
    "grind": "grind consistency",
    "print": "print quality",
    "weather": "weather resistance",
    "pitching": "setup",
    "filter": "the filter",
    "boil": "boil time",
    "toughness": "durability",
    "age": "the age range",
    "batteries": "battery life",
    "skin": "how my skin reacts",
    "finish": "the finish",
    "consistency": "the consistency",
    "support": "neck support",
    "air": "air quality",
    "suction": "suction",
    "navigation": "navigation",
    "blackout": "blocking light",
}

# --- shared banks ---------------------------------------------------------------------------

SHIPPING: Bank = {
    "pos": (
        "Arrived two days early and well packed.",
        "Shipping was fast, {days} days door to door.",
        "Came in the original box with no damage.",
        "Delivery was quicker than promised, even with the holiday rush.",
    ),
    "neg": (
        "Shipping took {weeks} weeks and the tracking number never updated.",
        "The box arrived crushed and half open.",
        "Delivery was supposed to be {weekday} and it showed up {days} days late.",
        "The courier left {obj} in the rain outside the building.",
        "The package was marked delivered, but I had to chase it down at a neighbor's.",
        "It arrived used, with someone else's return label still inside.",
    ),
    "mix": (
        "Shipping was slow, but at least everything arrived intact.",
        "The box was beat up, though {the} itself survived.",
    ),
}

SUPPORT: Bank = {
    "pos": (
        "Customer service replaced {obj} within a week, no questions asked.",
        "Support answered my email in a few hours and actually solved the problem.",
        "I had a question and the support chat was genuinely helpful.",
    ),
    "neg": (
        "Customer support is useless: {n} emails and not one real answer.",
        "Support keeps sending me the same copy-pasted troubleshooting steps.",
        "I've been on hold for {mins} minutes, twice now.",
        "The seller refused a return because I had opened the box.",
        "They promised a replacement {weeks} weeks ago and nothing has arrived.",
    ),
    "mix": (
        "Support was polite but couldn't actually fix anything.",
        "Getting a replacement took a while, but they did eventually send one.",
    ),
}

PRICE: Bank = {
    "pos": (
        "For ${price} it's a steal.",
        "Great value; I got {obj} on sale for ${price}.",
        "Cheaper than {competitor} and honestly better.",
    ),
    "neg": (
        "Way overpriced at ${price}.",
        "Not worth ${price}, not even close.",
        "For ${price} I expected a lot more.",
    ),
    "mix": (
        "A bit pricey at ${price}, but you get what you pay for.",
        "Worth it on sale, not at full price.",
    ),
}

COMPARISONS: Bank = {
    "pos": (
        "Much better than {competitor}.",
        "I switched from {competitor} and I'm not going back.",
        "Compared to {competitor}, this is a clear upgrade.",
    ),
    "neg": (
        "Honestly, {competitor} was better in every way.",
        "I should have stuck with {competitor}.",
        "Even {competitor} held up better than this.",
    ),
    "mix": (
        "About the same as {competitor}, just cheaper.",
        "Not as good as {competitor}, but half the price.",
    ),
}

OPENERS: Bank = {
    "pos": (
        "Really happy with this purchase.",
        "Exceeded my expectations.",
        "I don't usually write reviews, but {this} deserve{s} one.",
        "Wow.",
        "Best purchase I've made this year.",
        "Solid {noun}.",
        "This is my second one; I bought another for {person}.",
        "Five stars, no hesitation.",
    ),
    "neg": (
        "Very disappointed.",
        "I really wanted to like {this}.",
        "Save your money.",
        "Do not buy.",
        "What a letdown.",
        "I rarely leave negative reviews, but here we are.",
        "Returned.",
        "Buyer beware.",
    ),
    "mix": (
        "Mixed feelings about {this}.",
        "It's complicated.",
        "Some good, some bad.",
        "Decent, but not without issues.",
        "Somewhere in the middle for me.",
        "Not bad, not great.",
    ),
    "neutral": (
        "Here are my notes after {dur}.",
        "Had {this} for {dur} now.",
        "Quick review for anyone on the fence.",
        "Some facts, since the listing is vague.",
    ),
}

CLOSERS: Bank = {
    "pos": (
        "Highly recommend.",
        "Would buy again.",
        "I'd recommend {obj} to anyone.",
        "Already ordered a second one for {person}.",
        "Worth every penny.",
        "If you're on the fence, just get {obj}.",
    ),
    "neg": (
        "I would not recommend {obj}.",
        "Returning {obj} tomorrow.",
        "Avoid.",
        "Zero stars if I could.",
        "Save yourself the headache and look elsewhere.",
        "Back to {competitor}.",
        "Requested a refund; we'll see if it comes through.",
    ),
    "mix": (
        "Would I buy {obj} again? Probably, but only on sale.",
        "Okay for the price; just manage your expectations.",
        "Keeping {obj} for now, but I wouldn't rush to recommend {obj}.",
        "Maybe wait for the next version.",
        "Good enough, I guess.",
    ),
    "neutral": (
        "It does what it says.",
        "We'll see how {sub} hold{s} up.",
        "Will update if anything changes.",
        "No strong feelings either way.",
    ),
}

NEUTRAL_FACTS = (
    "{Sub} arrived on {weekday}.",
    "I've used {obj} for {dur} so far.",
    "{Sub} {is} about what you'd expect at this price.",
    "Bought {this} to replace {competitor}.",
    "The color is slightly different from the photo.",
    "{Sub} {is} exactly as described in the listing.",
)

MUSINGS: Bank = {
    "pos": (
        "I spent way too long reading reviews before buying, and for once the hype was justified.",
        "It's been {dur} and I still reach for {obj} every day.",
        "{Person} was skeptical at first and now borrows {obj} constantly.",
        "Whoever made {this} clearly cares about the details.",
        "I've recommended {obj} to at least {n} friends at this point.",
        "If I had to nitpick, the color is a little different from the photos, but who cares.",
        "I keep waiting for the catch, and so far there isn't one.",
        "It's the little things that make the difference here.",
        "I bought {obj} on a whim during a sale and it turned out to be the best buy of my year.",
        "Honestly I expected to return {obj}, so this review surprises me too.",
        "I don't say this often, but I'm genuinely impressed.",
        "It's rare that something lives up to the listing photos, and this one does.",
        "Every time I use {obj} I'm a little glad I bought {obj}.",
        "I was burned by a cheap version before, so this was a relief.",
        "Nothing about {obj} feels like an afterthought.",
    ),
    "neg": (
        "I gave {obj} a fair chance, {dur} of daily use, before writing this.",
        "Looking at the other one-star reviews, I'm clearly not the only one.",
        "It feels like the company cut corners everywhere they thought nobody would look.",
        "I tried everything the FAQ suggested and nothing changed.",
        "{Person} laughed when I said what I paid.",
        "I'm honestly surprised this passed any kind of quality control.",
        "The listing photos are very generous, to put it mildly.",
        "The five-star reviews must be for a different product, or they're not real.",
        "I've wasted more time on {this} than on anything else I've bought this year.",
        "It's not one big problem, it's a dozen small ones that add up.",
        "I really hate writing reviews like this, but people should know.",
        "The worst part is how good it looked on paper.",
        "I've bought cheaper things that worked far better.",
        "It's clear nobody tested this in a real home before shipping it.",
        "Every fix I tried lasted about a day.",
    ),
    "mix": (
        "Part of me wants to return {obj}, and part of me is too lazy to deal with the hassle.",
        "Some days {sub} work{s} perfectly, other days I want to throw {obj} out the window.",
        "If they fix the issues in a future revision, this could be a five-star product.",
        "Honestly, it's somewhere between good and annoying.",
        "I went back and forth on the rating for a while.",
        "For every thing I like about {obj}, there's something that annoys me.",
        "It's fine. Really, that's the word: fine.",
        "I keep changing my mind about {obj}.",
        "Not a bad product, just an uneven one.",
        "The good parts are really good, which makes the bad parts more annoying.",
        "I'd call it a solid first attempt.",
    ),
    "neutral": (
        "For context, I've owned {n} of these over the years from various brands.",
        "I'll try to be objective here.",
        "I bought {this} with my own money; nobody asked me to write this.",
        "Everything matches the listing, for what it's worth.",
    ),
}

UPDATES: Bank = {
    "pos": (
        "UPDATE after {dur}: still going strong, no issues at all.",
        "Edit ({month}): bought a second one. That should say enough.",
        "UPDATE: {dur} later and I'd still buy {obj} again without thinking.",
    ),
    "neg": (
        "UPDATE: {sub} stopped working completely after {weeks} weeks.",
        "Edit: the replacement has the exact same problem.",
        "UPDATE ({month}): still no reply from the seller.",
    ),
    "mix": (
        "UPDATE after {dur}: the problem comes and goes. Keeping the rating where it is.",
        "Edit: support sent a replacement, which is better but not perfect.",
    ),
    "neutral": ("UPDATE: nothing new to report after {dur}.",),
}

TINY: Bank = {
    "pos": (
        "Love {obj}!",
        "Love {this}.",
        "Perfect for {person}.",
        "{Person} loves {obj}.",
        "Great {noun}.",
        "Great {noun}, fast shipping.",
        "Excellent {noun}, highly recommend.",
        "Best {noun} I've owned.",
        "Exactly what I needed.",
        "Works great, no complaints.",
        "Super happy with {obj}.",
        "A+ {noun}",
        "Amazing value for the money.",
    ),
    "neg": (
        "Broke in a week.",
        "{Sub} broke after {days} days.",
        "Junk.",
        "Total waste of money.",
        "Terrible {noun}.",
        "Never arrived.",
        "Returned {obj}.",
        "Cheap garbage, do not buy.",
        "Stopped working after {weeks} weeks.",
        "Not as described.",
    ),
    "mix": (
        "Meh.",
        "It's fine, I guess.",
        "Okay for the price.",
        "Decent {noun}, slow shipping.",
        "Does the job, nothing special.",
        "Not bad, not great.",
        "Good {noun}, bad support.",
    ),
    "neutral": (
        "As described.",
        "Does what it says.",
        "Arrived on time.",
        "Average {noun}.",
        "{Sub} {is} okay.",
    ),
}

EMOJI = {
    "pos": (" 😍", " 👍", " ⭐⭐⭐⭐⭐", " 🔥🔥", " 🙌", " ❤️", " 😊"),
    "neg": (" 😡", " 👎", " 🤬", " 😞", " 💩"),
    "mix": (" 🤷", " 😐", " 🤔"),
    "neutral": (" 🙂", " 👌"),
}

SPANISH: Bank = {
    "pos": (
        "Llegó rápido y funciona perfectamente.",
        "La calidad es excelente para el precio.",
        "Lo recomiendo totalmente.",
        "Mi hija está encantada.",
        "Muy buena compra, volvería a comprarlo.",
        "Tal como se describe.",
    ),
    "neg": (
        "Se rompió a las dos semanas, muy decepcionado.",
        "El envío tardó casi un mes.",
        "No se parece en nada a la foto.",
        "El servicio al cliente nunca respondió.",
        "No lo recomiendo.",
    ),
    "mix": (
        "Está bien, pero esperaba más por este precio.",
        "Funciona, aunque las instrucciones solo vienen en inglés.",
        "La calidad es aceptable, el envío fue lento.",
    ),
}

FRENCH: Bank = {
    "pos": (
        "Très bon produit, je recommande.",
        "Livraison rapide, emballage soigné.",
        "Rapport qualité-prix imbattable.",
        "Mon fils l'adore.",
        "Conforme à la description, rien à redire.",
    ),
    "neg": (
        "Qualité médiocre, très déçu.",
        "Le service client ne répond jamais.",
        "Cassé au bout de trois jours.",
        "Colis arrivé abîmé et incomplet.",
        "À éviter.",
    ),
    "mix": (
        "Bon rapport qualité-prix, mais la notice est incompréhensible.",
        "Ça fait le travail, sans plus.",
        "Joli, mais plus petit que prévu.",
    ),
}

CJK_TEXTS: tuple[tuple[str, int], ...] = (
    ("とても使いやすいです。値段の割に品質が良くて満足しています。", 5),
    ("质量很好，物流也很快，推荐购买！", 5),  # noqa: RUF001 (fullwidth punctuation is real)
    ("배송은 빨랐는데 품질은 그냥 그래요.", 3),
    ("Bought this on a trip to Tokyo - 最高です! Works great, zero complaints.", 5),
)

# Realistic short texts that many people write word for word: the planted duplicates.
STOCK_TEXTS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("Great product, works as described.", (4, 5)),
    ("Works as expected.", (4, 5)),
    ("Five stars.", (5,)),
    ("Love it!", (5,)),
    ("Good value for the money.", (4, 5)),
    ("Exactly as pictured.", (4, 5)),
    ("It's okay.", (3,)),
    ("Arrived damaged.", (1, 2)),
    ("Does not work.", (1,)),
)

BLANK_TEXTS = ("", " ", "   ", "\n", "\t", " \n ", "\n\n")

PEOPLE = (
    "my wife",
    "my husband",
    "my son",
    "my daughter",
    "my partner",
    "my mom",
    "my dad",
    "my roommate",
    "my teenager",
    "a friend",
    "my coworker",
    "my grandmother",
)
KIDS = (
    "my son",
    "my daughter",
    "my nephew",
    "my niece",
    "my grandson",
    "our toddler",
    "my 6-year-old",
)
DURATIONS = (
    "a week",
    "two weeks",
    "a month",
    "six weeks",
    "two months",
    "three months",
    "six months",
    "a year",
)
CITIES = ("Denver", "Lisbon", "Montréal", "São Paulo", "Chicago", "Zürich", "Osaka", "Austin")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "March", "April", "June", "August", "October", "November")

SENTIMENTS = {
    5: ("pos",),
    4: ("pos",) * 3 + ("mix",),
    3: ("mix",) * 3 + ("neutral",) * 2,
    2: ("neg",) * 2 + ("mix",),
    1: ("neg",),
}

# (kind, weight, word-target range); targets are rough, reviews stop at a sentence.
LENGTH_CLASSES = (
    ("tiny", 15, (1, 10)),
    ("short", 34, (10, 45)),
    ("medium", 31, (45, 150)),
    ("long", 11, (150, 300)),
    ("essay", 9, (300, 1500)),
)


# Sections only long reviews have: why they bought it, what they'd change, who it's for.
BACKGROUND = (
    "I'd been using {competitor} for years before this.",
    "My old one gave out on a {weekday} and I needed a replacement fast.",
    "I compared this with {n} other options over a couple of weeks.",
    "{Person} has one and kept talking about it, so I caved.",
    "I read the top reviews here and watched a couple of videos before ordering.",
    "The price dropped to ${price} in a sale and I finally pulled the trigger.",
    "I'm not an expert, just someone who buys this kind of thing a lot.",
    "I'm picky about this kind of thing, so take this review with that in mind.",
    "Full disclosure: I returned the first one I ordered for an unrelated reason.",
    "This is a long one, sorry. I wish more reviews went into detail, so here goes.",
    "I've bought {n} of these from different brands over the years, so I have a baseline.",
    "I waited {dur} before writing this so I could say something useful.",
    "Some context: I'm on a budget and I research everything before I buy.",
    "I nearly bought {competitor} instead, and it was a close call.",
)

WISHLIST = (
    "I wish the product page had more detail; I had to guess a lot before buying.",
    "A slightly lower price would make this a no-brainer.",
    "Please, stop with the plastic packaging.",
    "I wish the listing had been more honest about the size.",
    "More options (sizes, colors, bundles) would be nice.",
    "I'd love a refill or replacement-part option instead of buying the whole thing again.",
    "Clearer instructions or care notes in the box would help.",
    "A loyalty discount for repeat buyers would be a nice touch.",
)

WHO_FOR: Bank = {
    "pos": (
        "If you just want something that works, this is it.",
        "Great for beginners, and good enough for most enthusiasts.",
        "It would make a great gift.",
        "Anyone on a budget should look at this first.",
    ),
    "neg": (
        "I can't think of anyone I'd recommend this to.",
        "Maybe fine if you'll only use it twice a year.",
        "If you're on a budget, spend a little more on something that lasts.",
    ),
    "mix": (
        "Fine for casual use; power users should look elsewhere.",
        "Good for beginners, less so if you know what you're doing.",
        "Okay as a backup, not as your main one.",
    ),
    "neutral": (
        "It's aimed at casual users, and that's fine.",
        "Whether it's for you depends on how often you'll use it.",
    ),
}

FIRST_IMPRESSIONS: Bank = {
    "pos": (
        "Out of the box, it made a great impression.",
        "Unboxing was nice; everything was neatly packed and nothing was missing.",
        "It looked exactly like the photos, maybe even a little nicer.",
        "Within the first hour I could tell this was a step up from what I had.",
        "Everything was included, down to the small extras.",
    ),
    "neg": (
        "Not a great start.",
        "Right out of the box something looked off.",
        "It looked noticeably cheaper than in the photos.",
        "One piece was missing and another was scratched.",
        "It smelled strongly of chemicals when I opened the box.",
    ),
    "mix": (
        "A mixed start.",
        "It looked fine out of the box, if a bit plainer than the photos.",
        "Nothing was missing, but the packaging had clearly been opened before.",
    ),
    "neutral": (
        "Out of the box, it's exactly what the listing shows.",
        "Nothing surprising on unboxing.",
    ),
}

DAILY_USE: Bank = {
    "pos": (
        "Day to day, {sub} just work{s}, which is all I want.",
        "It's become part of my routine without me thinking about it.",
        "{Person} and I both use {obj}, and neither of us has had a problem.",
        "It's been reliable every single day for {dur}.",
        "I've stopped thinking about {obj}, which is the best compliment I can give.",
    ),
    "neg": (
        "Day to day, it's a constant small annoyance.",
        "Every time I use {obj}, something is slightly off.",
        "{Person} refuses to use {obj} anymore.",
        "I've started avoiding {obj} and going back to {competitor}.",
        "It's the kind of product you work around rather than with.",
    ),
    "mix": (
        "Day to day, it's fine as long as I don't expect too much.",
        "Most days it's okay; once a week or so it frustrates me.",
        "{Person} likes {obj} more than I do.",
    ),
    "neutral": ("I use {obj} a few times a week.", "Usage has been light so far."),
}

VERDICTS: Bank = {
    "pos": (
        "Bottom line: {this} earn{s} every star.",
        "Verdict: buy it.",
        "Overall, easily one of my better purchases.",
        "In short: great product, fair price, no regrets.",
    ),
    "neg": (
        "Bottom line: not worth the money or the hassle.",
        "Verdict: avoid.",
        "Overall, one of the worst purchases I've made in a while.",
    ),
    "mix": (
        "Bottom line: decent, with caveats.",
        "Verdict: okay if it's on sale.",
        "Overall, not a bad product, just not the one I hoped for.",
    ),
    "neutral": ("Bottom line: it does the job.",),
}

# How the mood of an UPDATE section drifts from the review's: products wear out, fixes arrive.
DRIFT = {
    "pos": ("pos", "pos", "pos", "mix"),
    "neg": ("neg", "neg", "neg", "mix"),
    "mix": ("pos", "neg", "mix"),
    "neutral": ("mix", "pos", "neg"),
}

UPDATE_HEADS: Bank = {
    "pos": (
        "UPDATE after {later}: still going strong.",
        "Edit, {later} in: still happy, so a few more notes.",
        "UPDATE ({later}): I'd still buy {obj} again.",
    ),
    "neg": (
        "UPDATE after {later}: things have gotten worse.",
        "Edit, {later} in: no better.",
        "UPDATE ({later}): I wanted to give it more time. That was a mistake.",
    ),
    "mix": (
        "UPDATE after {later}: some things better, some worse.",
        "Edit, {later} in: a mixed bag since my first review.",
        "UPDATE ({later}): still on the fence.",
    ),
}
LATER = ("two weeks", "a month", "six weeks", "two months", "three months", "five months")
LATER += ("six months", "eight months", "a year", "fourteen months")

# Questions other shoppers asked, answered inside long reviews ("A few people asked, so: ...").
QUESTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "electronics": (
        ("Does it work with an iPhone?", "Yes, I use {obj} with an iPhone and a Windows laptop."),
        ("Is there a warranty?", "One year from the manufacturer. Keep the receipt."),
        ("Does it get hot?", "Warm after a few hours of heavy use, nothing worrying."),
        ("Can you use it while it charges?", "Yes, I do that all the time."),
        ("Are there firmware updates?", "I've had {n} in {dur}, mostly small fixes."),
        ("Do you need the app?", "Only for the extra settings; the basics work without it."),
    ),
    "kitchen": (
        ("Is it dishwasher safe?", "The manual says hand wash only. I ignore that sometimes."),
        ("Does it work on induction?", "I don't have induction, so I can't say, sorry."),
        ("How heavy is it?", "Heavier than it looks. Not a problem on the counter."),
        ("Is there a warranty?", "Two years, according to the card in the box."),
        ("Is it big enough for a family?", "For the four of us, yes, with a little planning."),
        ("Any chemical smell?", "A little the first time, gone after that."),
    ),
    "books": (
        ("Is it a standalone?", "Yes, though there are hints of a sequel."),
        ("Is it okay for teenagers?", "I'd say 15 and up; there are a couple of dark scenes."),
        ("Is the font readable?", "It's on the small side; if you wear glasses, get the e-book."),
        ("Do you need to read the earlier books?", "No, but it helps with a few characters."),
        ("Is it the full edition?", "Yes, unabridged, with the afterword."),
    ),
    "outdoor": (
        ("Is it really waterproof?", "It kept everything dry in a steady drizzle for me."),
        ("How small does it pack?", "About the size of a loaf of bread."),
        ("Does it work for tall people?", "I'm six foot one and it's fine."),
        ("Does it come with a repair kit?", "A small one, yes."),
        ("Is it good for winter?", "Three seasons, not real winter."),
    ),
    "toys": (
        ("What age is it good for?", "Ours was {age} and it was just right."),
        ("Does it need batteries?", "Check the box; ours needed batteries that weren't included."),
        ("Are there small pieces?", "Some, so keep them away from toddlers."),
        ("Is it loud?", "Not especially."),
        ("Does it come gift wrapped?", "No, but the box looks nice enough to give as is."),
    ),
    "beauty": (
        ("Is it fragrance-free?", "No, there's a light scent."),
        ("Does it work for oily skin?", "My sister has oily skin and likes it."),
        ("Is it cruelty-free?", "The box says so; I haven't checked further."),
        ("How long does one last?", "About {n} weeks with daily use."),
        ("Is there a travel size?", "Not that I could find."),
    ),
    "grocery": (
        ("Is it gluten-free?", "The label says so, but read the fine print if you're celiac."),
        ("How long does it keep once opened?", "About {n} weeks in a sealed container."),
        ("Is it very sweet?", "Less sweet than most brands I've tried."),
        ("Is the packaging recyclable?", "The box is; the inner bag isn't."),
        ("Is it vegan?", "The ingredients look vegan to me, but it's not certified."),
    ),
    "home": (
        ("How long does assembly take?", "Around {mins} minutes for me, alone."),
        ("Is it pet friendly?", "Our cats ignore it, which is the best outcome."),
        ("Does it come with wall anchors?", "Yes, though I used my own."),
        ("Are the dimensions accurate?", "Close to the listing, within a centimeter or so."),
        ("Is it noisy?", "Not noticeably."),
    ),
}

# A dated list of what happened, the way people document a dispute (or a happy ending).
TIMELINE: Bank = {
    "pos": (
        "ordered",
        "arrived, a day early",
        "first proper use, all good",
        "{person} borrowed {obj} for the weekend",
        "took {obj} on a trip to {city}",
        "still working perfectly",
        "bought a second one as a gift",
    ),
    "neg": (
        "ordered",
        "arrived {days} days late, box damaged",
        "first problem",
        "contacted support (ticket #{ticket})",
        "support replied with a template",
        "same problem again, twice in one day",
        "asked for a return",
        "return label finally arrived",
        "sent {obj} back",
        "still waiting for the refund",
    ),
    "mix": (
        "ordered",
        "arrived on time",
        "first small issue",
        "found a workaround on a forum",
        "issue came back",
        "firmware update / replacement part, mostly fixed",
        "working, with the occasional hiccup",
    ),
}


# Digressions that essays wander into, about anything but the product itself.
TANGENTS = (
    "Side note: the listing has changed at least twice since I ordered.",
    "I also noticed the price went up by ${n} the week after I bought mine.",
    "Funny enough, {person} ordered the same thing the same week without us talking about it.",
    "I've read pretty much every review on here at this point, good and bad.",
    "Some photos people posted look like a slightly different version, so check what you get.",
    "For what it's worth, I'm not affiliated with the company in any way.",
    "Yes, I know I'm overthinking this. It's what I do.",
    "The card in the box has a QR code that leads to a page that doesn't exist.",
    "I kept the box, just in case.",
    "It's the sort of purchase you don't think about until something goes wrong.",
    "I reread the listing to check what was promised, and it's vaguer than I remembered.",
    "If anyone from the company reads this: small details matter.",
    "Anyway, I digress.",
    "I had a coupon, so I paid a bit less than the listed price.",
    "Shopping for this stuff online is exhausting; every listing claims to be the best.",
    "My neighbor asked where I got {obj}, which says something.",
)

RESTATE = ("Like I said, ", "Again, ", "As I mentioned, ", "I'll say it again: ")

CONNECTORS = ("However, ", "But ", "On the other hand, ", "That said, ", "Still, ")
MINOR_COMPLAINT = ("My only complaint: ", "One small gripe: ", "If I'm picky, ", "Minor thing: ")
FAIR_POINT = ("To be fair, ", "In fairness, ", "The one good thing: ", "I'll give them this: ")


# --- one review -------------------------------------------------------------------------------


AN_EIGHT = re.compile(r"\b([Aa]) (?=(?:8|11|18|8\d)\b)")  # "a 8-day trip" -> "an 8-day trip"


class Writer:
    """One review in the making: its slots, its mood per aspect, the templates it has used."""

    def __init__(self, rng: random.Random, category: str, product: Product, sentiment: str):
        self.rng = rng
        self.category = category
        self.product = product
        self.sentiment = sentiment
        self.fixed = self._fixed_slots()
        self.moods = aspect_moods(rng, product.aspects, sentiment)
        self.headings = rng.random() < 0.3
        self.used: set[str] = set()

    def _fixed_slots(self) -> dict[str, str]:
        rng, p = self.rng, self.product
        person = rng.choice(KIDS if self.category == "toys" else PEOPLE)
        low, high = PRICE_RANGE[self.category]
        this = ("these " if p.plural else "this ") + p.noun
        return {
            "product": p.name,
            "noun": p.noun,
            "the": "the " + p.noun,
            "this": this,
            "sub": "they" if p.plural else "it",
            "Sub": "They" if p.plural else "It",
            "obj": "them" if p.plural else "it",
            "is": "are" if p.plural else "is",
            "was": "were" if p.plural else "was",
            "has": "have" if p.plural else "has",
            "s": "" if p.plural else "s",
            "dur": rng.choice(DURATIONS),
            "person": person,
            "Person": person[0].upper() + person[1:],
            "competitor": rng.choice(COMPETITORS[self.category]),
            "price": f"{rng.randint(low, high)}.{rng.choice(('99', '95', '49', '00'))}",
        }

    def fill(self, template: str, **extra: str) -> str:
        """The template with this review's slots and fresh numbers (each call draws anew)."""
        rng = self.rng
        page = rng.randint(40, 250)
        fresh = {
            "hours": str(rng.randint(2, 30)),
            "few": str(rng.randint(2, 5)),
            "pct": str(rng.randint(5, 60)),
            "n": str(rng.randint(2, 9)),
            "days": str(rng.randint(2, 10)),
            "weeks": str(rng.randint(2, 8)),
            "mins": str(rng.randint(15, 90)),
            "miles": str(rng.randint(3, 20)),
            "temp": str(rng.randint(15, 45)),
            "page": str(page),
            "page2": str(page + 16),
            "age": str(rng.randint(3, 9)),
            "age2": str(rng.randint(10, 13)),
            "weekday": rng.choice(WEEKDAYS),
            "city": rng.choice(CITIES),
            "month": rng.choice(MONTHS),
        }
        return AN_EIGHT.sub(r"\1n ", template.format_map(self.fixed | fresh | extra))

    def pick(self, options: Sequence[str], **extra: str) -> str | None:
        """A sentence from options that this review has not used yet, filled; None if none left."""
        fresh = [t for t in options if t not in self.used]
        if not fresh:
            return None
        template = self.rng.choice(fresh)
        self.used.add(template)
        return self.fill(template, **extra)

    def from_bank(self, bank: Bank, polarity: str) -> str | None:
        options = bank.get(polarity) or bank.get("mix") or bank["pos"]
        return self.pick(options)

    def maybe(self, chance: float, bank: Bank, polarity: str | None = None) -> list[str]:
        """A sentence from bank with the given chance, as a list of zero or one."""
        if self.rng.random() >= chance:
            return []
        sentence = self.from_bank(bank, polarity or self.sentiment)
        return [sentence] if sentence else []


def aspect_moods(rng: random.Random, aspects: Sequence[str], sentiment: str) -> dict[str, str]:
    """How the reviewer feels about each aspect: mostly the overall mood, with exceptions.

    Real reviews are rarely one-note: a five-star review has its one gripe, a mixed one
    likes some things and hates others.
    """
    moods = {}
    for aspect in aspects:
        roll = rng.random()
        if sentiment == "pos":
            moods[aspect] = "neg" if roll < 0.15 else "pos"
        elif sentiment == "neg":
            moods[aspect] = "pos" if roll < 0.12 else "neg"
        elif sentiment == "mix":
            moods[aspect] = ("pos", "neg", "mix")[int(roll * 3)]
        else:
            moods[aspect] = "mix" if roll < 0.6 else ("pos", "neg")[int(roll * 10) % 2]
    if sentiment == "mix" and len(aspects) > 1:
        first, last = aspects[0], aspects[-1]
        moods[first], moods[last] = "pos", "neg"
    return moods


def decapitalize(sentence: str, keep: str) -> str:
    """Lower the first letter after a connector, unless it starts a name, 'I' or an acronym."""
    first = sentence.split(" ", 1)[0]
    if first in ("I", "I'm", "I've", "I'd") or sentence.startswith(keep):
        return sentence
    if len(first) > 1 and first[1].isupper():
        return sentence
    return sentence[0].lower() + sentence[1:]


def aspect_sentences(w: Writer, aspect: str, count: int, first: bool = False) -> list[str]:
    """Sentences about one aspect in its mood; a connector first if it goes against the review.

    first: these open the review, so there is nothing yet to contrast them with.
    """
    mood = w.moods[aspect]
    sentences = [s for s in (w.from_bank(ASPECTS[aspect], mood) for _ in range(count)) if s]
    if not sentences or first:
        return sentences
    contrary = (w.sentiment, mood) in (("pos", "neg"), ("neg", "pos"))
    if contrary or (w.sentiment == "mix" and w.rng.random() < 0.4):
        table = {"pos": MINOR_COMPLAINT, "neg": FAIR_POINT}.get(w.sentiment, CONNECTORS)
        sentences[0] = w.rng.choice(table) + decapitalize(sentences[0], w.product.name)
    return sentences


def spread_aspects(w: Writer, count: int, opening: bool) -> list[str]:
    """One sentence each about up to count aspects, those in the review's mood first.

    The gripe in a happy review comes after the praise, not instead of it.
    """
    aspects = list(w.product.aspects)
    w.rng.shuffle(aspects)
    aspects.sort(key=lambda a: w.moods[a] != w.sentiment)
    if count < 2:
        aspects = [a for a in aspects if w.moods[a] == w.sentiment] or aspects
    out: list[str] = []
    for aspect in aspects[:count]:
        out += aspect_sentences(w, aspect, 1, first=opening and not out)
    return out


def shared_mood_of(sentiment: str) -> str:
    """Polarity for the shared banks: neutral reviews talk like mixed ones there."""
    return "mix" if sentiment == "neutral" else sentiment


def extras(w: Writer, scale: float) -> list[str]:
    """Shipping, support, price and comparison remarks; negative reviews complain more."""
    rng, out = w.rng, []
    angry = w.sentiment == "neg"
    chances = (
        (SHIPPING, 0.35 if angry else 0.2),
        (SUPPORT, 0.3 if angry else 0.08),
        (PRICE, 0.3),
        (COMPARISONS, 0.25),
    )
    for bank, chance in chances:
        if rng.random() < min(1.0, chance * scale):
            polarity = (
                shared_mood_of(w.sentiment) if rng.random() < 0.85 else rng.choice(("pos", "neg"))
            )
            out += [s for s in (w.from_bank(bank, polarity),) if s]
    return out


def tiny_review(w: Writer) -> str:
    """A few words: 'Love it!', 'Broke in a week.'"""
    return w.from_bank(TINY, w.sentiment) or "Okay."


def short_review(w: Writer) -> str:
    """One to four sentences: maybe an opener, a point or two, maybe a closer."""
    parts = w.maybe(0.35, OPENERS)
    parts += spread_aspects(w, w.rng.randint(1, 2), opening=not parts)
    parts += extras(w, 0.5)[:1] + w.maybe(0.35, CLOSERS)
    return " ".join(parts[:4])


def medium_review(w: Writer) -> str:
    """One paragraph: opener, context, a few aspects, shipping or price, a closing line."""
    parts = w.maybe(0.7, OPENERS)
    if w.rng.random() < 0.6:
        parts += [s for s in (w.pick(CONTEXTS[w.category]),) if s]
    if w.sentiment == "neutral":
        parts += [s for s in (w.pick(NEUTRAL_FACTS),) if s]
    parts += spread_aspects(w, w.rng.randint(2, 4), opening=not parts) + extras(w, 1.0)
    parts += w.maybe(0.3, MUSINGS) + w.maybe(0.85, CLOSERS) + w.maybe(0.08, UPDATES)
    return " ".join(parts)


def pros_and_cons(w: Writer) -> str:
    """The bulleted list long reviews love, following the moods of the aspects."""
    pros = [ASPECT_LABELS.get(a, a) for a, m in w.moods.items() if m == "pos"]
    cons = [ASPECT_LABELS.get(a, a) for a, m in w.moods.items() if m == "neg"]
    if w.rng.random() < 0.5:
        (pros if w.sentiment == "pos" else cons).append("the price")
    lines = ["Pros:", *(f"- {p}" for p in pros or ["not much"])]
    lines += ["", "Cons:", *(f"- {c}" for c in cons or ["nothing major"])]
    return "\n".join(lines)


def with_heading(w: Writer, heading: str, sentences: list[str]) -> list[str]:
    """Some essay writers put headings over their sections; most don't."""
    if w.headings and sentences:
        return [f"{heading}:\n" + sentences[0], *sentences[1:]]
    return sentences


def questions_answered(w: Writer) -> list[str]:
    """Two to four Q&A pairs from the category's common questions."""
    pairs = w.rng.sample(QUESTIONS[w.category], w.rng.randint(2, 4))
    lines = [f"Q: {q}\nA: {w.fill(a)}" for q, a in pairs]
    intro = w.rng.choice(("A few people asked questions, so:", "Answers to the questions I got:"))
    return [intro + "\n\n" + "\n\n".join(lines)]


def timeline(w: Writer) -> list[str]:
    """A dated list of events, in order, ending wherever this review's story ends."""
    events = TIMELINE[shared_mood_of(w.sentiment)]
    count = w.rng.randint(4, len(events))
    day = dt.date(2024, 1, 1) + dt.timedelta(days=w.rng.randint(0, 300))
    lines = []
    for event in events[:count]:
        lines.append(
            f"- {day:%B} {day.day}: {w.fill(event, ticket=str(w.rng.randint(10**5, 10**6)))}"
        )
        day += dt.timedelta(days=w.rng.randint(1, 12))
    return ["Timeline, for anyone keeping score:\n" + "\n".join(lines)]


def essay_paragraphs(w: Writer) -> Iterator[list[str]]:
    """Paragraphs (as sentence lists) of a long review, in reading order, until banks run dry."""
    rng = w.rng
    yield [*w.maybe(0.9, OPENERS), w.pick(BACKGROUND) or "", w.pick(CONTEXTS[w.category]) or ""]
    yield with_heading(w, "First impressions", w.maybe(1.0, FIRST_IMPRESSIONS))
    aspects = list(w.product.aspects)
    rng.shuffle(aspects)
    for aspect in aspects:
        yield aspect_sentences(w, aspect, rng.randint(2, 4)) + w.maybe(0.3, MUSINGS)
    daily = w.maybe(1.0, DAILY_USE) + w.maybe(0.6, DAILY_USE)
    yield with_heading(w, "Day to day", [*daily, w.pick(TANGENTS) or ""])
    yield extras(w, 2.5) + w.maybe(0.5, MUSINGS)
    yield [w.pick(BACKGROUND) or "", *w.maybe(0.8, MUSINGS)]
    yield [pros_and_cons(w)]
    if w.rng.random() < 0.5:
        yield timeline(w)
    yield questions_answered(w)
    yield [*w.maybe(1.0, WHO_FOR), w.pick(WISHLIST) or "", *w.maybe(0.7, MUSINGS)]
    yield w.maybe(1.0, MUSINGS) + w.maybe(1.0, MUSINGS)
    yield with_heading(w, "Verdict", w.maybe(1.0, VERDICTS))


def restated(w: Writer, aspect: str) -> list[str]:
    """A point made again, as ramblers do, once everything new about an aspect has been said."""
    said = [t for t in ASPECTS[aspect].get(w.moods[aspect], ()) if t in w.used]
    if not said:
        return []
    sentence = w.fill(w.rng.choice(said))
    return [w.rng.choice(RESTATE) + decapitalize(sentence, w.product.name)]


def update_section(w: Writer, number: int) -> list[str]:
    """UPDATE number: the mood may drift, and the update talks about what fits its mood."""
    rng = w.rng
    tone = rng.choice(DRIFT[w.sentiment])
    for aspect in rng.sample(list(w.moods), min(2, len(w.moods))):
        w.moods[aspect] = tone
    on_topic = [a for a, mood in w.moods.items() if tone == "mix" or mood == tone]
    body: list[str] = []
    restates = 0
    for aspect in rng.sample(on_topic, len(on_topic)):
        sentences = aspect_sentences(w, aspect, rng.randint(1, 3), first=True)
        if not sentences and restates < 2 and rng.random() < 0.6:
            sentences, restates = restated(w, aspect), restates + 1
        body += sentences
    body += [*w.maybe(0.5, MUSINGS, tone), w.pick(TANGENTS) or ""]
    head = w.fill(rng.choice(UPDATE_HEADS[tone]), later=LATER[min(number, len(LATER) - 1)])
    return [head + "\n\n" + " ".join(s for s in body if s), *w.maybe(0.6, DAILY_USE, tone)]


def long_review(w: Writer, target: int, essay: bool) -> str:
    """Paragraphs until about target words, then a closing line; essays may add UPDATEs."""
    paragraphs: list[str] = []
    words = 0
    updates = (update_section(w, number) for number in range(len(LATER) if essay else 0))
    for sentences in itertools.chain(essay_paragraphs(w), updates):
        text = " ".join(s for s in sentences if s)
        if not text:
            continue
        paragraphs.append(text)
        words += len(text.split())
        if words >= target:
            break
    paragraphs += w.maybe(0.9, CLOSERS)
    return "\n\n".join(paragraphs)


def non_english(rng: random.Random, sentiment: str) -> str:
    """A short review in Spanish or French."""
    bank = rng.choice((SPANISH, FRENCH))
    options = bank.get(sentiment) or bank["mix"]
    count = min(len(options), rng.randint(1, 3))
    return " ".join(rng.sample(options, count))


def restyle(rng: random.Random, text: str, sentiment: str) -> str:
    """Surface noise real reviews have: emoji, all lowercase, shouting, extra bangs."""
    roll = rng.random()
    if roll < 0.08:
        return text + rng.choice(EMOJI[sentiment])
    if roll < 0.12:
        return text.lower().rstrip(".")
    if roll < 0.14 and sentiment == "neg":
        return text + " " + rng.choice(("DO NOT BUY.", "AVOID!!!", "NEVER AGAIN."))
    if roll < 0.16 and sentiment == "pos":
        return text.rstrip(".!") + "!!!"
    return text


def word_target(rng: random.Random, low: int, high: int) -> int:
    """Skewed toward low: most long reviews are near the bottom of their range, a few at the top."""
    return round(low * (high / low) ** (rng.random() ** 2))


def pick_length(rng: random.Random) -> tuple[str, int, int]:
    """A length class and its word range, by the weights in LENGTH_CLASSES."""
    kinds = [k for k, _, _ in LENGTH_CLASSES]
    weights = [wt for _, wt, _ in LENGTH_CLASSES]
    kind = rng.choices(kinds, weights)[0]
    low, high = next(r for k, _, r in LENGTH_CLASSES if k == kind)
    return kind, low, high


def review_text(rng: random.Random, category: str, product: Product, rating: int) -> str:
    """A review consistent with its rating; length class, language and style at random."""
    sentiment = rng.choice(SENTIMENTS[rating])
    if rng.random() < 0.025:
        return non_english(rng, shared_mood_of(sentiment))
    w = Writer(rng, category, product, sentiment)
    kind, low, high = pick_length(rng)
    if kind == "tiny":
        return restyle(rng, tiny_review(w), sentiment)
    if kind == "short":
        return restyle(rng, short_review(w), sentiment)
    if kind == "medium":
        return restyle(rng, medium_review(w), sentiment)
    text = long_review(w, word_target(rng, low, high), essay=kind == "essay")
    return text + rng.choice(EMOJI[sentiment]) if rng.random() < 0.05 else text


# --- the one text over the context limit ------------------------------------------------------

DIARY = (
    "The {band} band dropped again at {hh}:{mm} while {person} was on a video call.",
    "Support ticket #{ticket} was closed without a reply, so I opened another one.",
    "Tried firmware {fw}. No change.",
    "Moved the satellite node {n} feet closer to the main unit, as the app suggested.",
    "Speed test: {down} Mbps down, {up} up, about a tenth of what I pay for.",
    "Rebooted {n} times today.",
    "The app says the network is 'Excellent' while nothing loads.",
    "Factory reset and re-added all {dev} devices by hand, again.",
    "Support asked me to send logs. Here they are, again.",
    "Changed the channel to {ch}, then to auto, then back to {ch}.",
    "The smart plugs fell off the network overnight, so the heating didn't come on.",
    "Called support: {mins} minutes on hold, then disconnected.",
    "Plugged my old router back in for an hour as a test; zero drops.",
    "The status light blinked amber, then white, then amber for {mins} minutes.",
    "Got an email asking me to rate my support experience. I did.",
)

LOG_EVENTS = (
    "wlan{r}: STA {mac} IEEE 802.11: disassociated (reason {code})",
    "wlan{r}: STA {mac} IEEE 802.11: associated (aid {aid})",
    "dhcpd: DHCPACK on 192.168.{a}.{b} to {mac} via br0",
    "mesh: backhaul RSSI {rssi} dBm below threshold, switching to channel {ch}",
    "kernel: ath11k: firmware crashed, restarting ({n} in last hour)",
    "wan0: link down",
    "wan0: link up 1000Mbps full duplex",
    "dnsmasq: query[A] {domain} from 192.168.{a}.{b}",
    "dnsmasq: reply {domain} is <CNAME>",
    "watchdog: meshd not responding for {secs}s, restarting",
    "cloud-agent: heartbeat failed (timeout after {ms} ms)",
    "hostapd: wlan{r}: DFS radar detected on channel {dfs}, moving",
    "ntpd: time resync, offset {offset} s",
    "firewall: DROP IN=wan0 SRC=203.0.113.{b} DST=198.51.100.{a} PROTO=TCP DPT={port}",
)

LOG_LEVELS = ("INFO", "INFO", "INFO", "WARN", "WARN", "ERROR", "DEBUG")
DOMAINS = ("example.com", "cdn.example.net", "api.weather.example", "time.example.org")


def log_line(rng: random.Random, when: dt.datetime) -> str:
    """One line of a router's system log."""
    mac = ":".join(f"{rng.randrange(256):02x}" for _ in range(6))
    event = rng.choice(LOG_EVENTS).format(
        r=rng.randint(0, 2),
        mac=mac,
        code=rng.choice((3, 4, 7, 8, 15)),
        aid=rng.randint(1, 40),
        a=rng.randint(0, 9),
        b=rng.randint(2, 254),
        rssi=-rng.randint(60, 92),
        ch=rng.choice((1, 6, 11, 36, 44, 100, 149)),
        dfs=rng.choice((52, 60, 100, 116, 132)),
        n=rng.randint(1, 12),
        domain=rng.choice(DOMAINS),
        secs=rng.randint(10, 120),
        ms=rng.randint(3000, 30000),
        offset=round(rng.uniform(-2, 2), 3),
        port=rng.choice((22, 23, 445, 3389, 8080)),
    )
    return f"{when:%Y-%m-%d %H:%M:%S} {rng.choice(LOG_LEVELS)} {event}"


def diary_entry(rng: random.Random, day: int, when: dt.datetime) -> str:
    """A day of the frustrated owner's notes."""
    notes = []
    for template in rng.sample(DIARY, rng.randint(2, 4)):
        notes.append(
            template.format(
                band=rng.choice(("2.4 GHz", "5 GHz")),
                hh=f"{rng.randint(0, 23):02d}",
                mm=f"{rng.randint(0, 59):02d}",
                person=rng.choice(PEOPLE),
                ticket=rng.randint(100000, 999999),
                fw=f"1.{rng.randint(0, 4)}.{rng.randint(0, 30)}",
                n=rng.randint(2, 9),
                down=rng.randint(4, 90),
                up=rng.randint(1, 20),
                dev=rng.randint(14, 31),
                ch=rng.choice((1, 6, 11, 36, 149)),
                mins=rng.randint(20, 95),
            )
        )
    return f"Day {day} ({when:%A %B %d}). " + " ".join(notes)


def huge_text(rng: random.Random, target_words: int = 40_000) -> str:
    """A one-star review with weeks of diary notes and a router log pasted in."""
    parts = [
        "I have owned the NetHaven AX3000 Mesh Router for about four months and I need to "
        "document everything, because support keeps telling me the problem is on my end. "
        "Sorry in advance for the length. I'm pasting my notes and the router's system log "
        "so that anyone searching for the same symptoms can compare."
    ]
    words = len(parts[0].split())
    when = dt.datetime(2024, 1, 8, 7, 0, 0)
    day = 0
    while words < target_words:
        day += 1
        entry = diary_entry(rng, day, when)
        lines = []
        for _ in range(rng.randint(15, 45)):
            when += dt.timedelta(seconds=rng.randint(1, 900))
            lines.append(log_line(rng, when))
        block = entry + "\n\nSystem log:\n" + "\n".join(lines)
        parts.append(block)
        words += len(block.split())
        when = when.replace(hour=7, minute=0, second=0) + dt.timedelta(days=1)
    parts.append(
        "If you read this far, you deserve a medal. One star, and only because zero isn't an "
        "option. Do not buy this router."
    )
    return "\n\n".join(parts)


# --- the table --------------------------------------------------------------------------------


@dataclass
class Plan:
    """Which row indices get the deliberate edge cases."""

    nulls: set[int]
    blanks: set[int]
    duplicates: dict[int, str]
    cjk: dict[int, tuple[str, int]]
    huge: int


def duplicate_groups(rng: random.Random, total: int) -> list[int]:
    """Group sizes (each at least 2) that add up to total: every planted text repeats."""
    sizes: list[int] = []
    remaining = total
    while remaining >= 2:
        size = min(remaining, rng.randint(2, 9))
        if remaining - size == 1:
            size += 1
        sizes.append(size)
        remaining -= size
    return sizes


def plan_edges(rng: random.Random, rows: int) -> Plan:
    """Pick the rows for the edge cases; their counts scale with rows (10 nulls per 3,000)."""
    n_null = max(1, round(rows / 300))
    n_blank = max(1, round(rows / 300))
    n_dup = max(2, round(rows / 75))
    n_cjk = min(len(CJK_TEXTS), max(1, round(rows / 750)))
    picked = rng.sample(range(rows), n_null + n_blank + n_dup + n_cjk + 1)
    nulls = set(picked[:n_null])
    blanks = set(picked[n_null : n_null + n_blank])
    dup_rows = picked[n_null + n_blank : n_null + n_blank + n_dup]
    cjk_rows = picked[n_null + n_blank + n_dup : -1]
    duplicates: dict[int, str] = {}
    texts = rng.sample([t for t, _ in STOCK_TEXTS], len(STOCK_TEXTS))
    start = 0
    for group, size in enumerate(duplicate_groups(rng, n_dup)):
        for index in dup_rows[start : start + size]:
            duplicates[index] = texts[group % len(texts)]
        start += size
    cjk = dict(zip(cjk_rows, CJK_TEXTS, strict=False))
    return Plan(nulls, blanks, duplicates, cjk, huge=picked[-1])


def pick_rating(rng: random.Random) -> int:
    """J-shaped, like real review sites: mostly fives, a bump at one star."""
    return rng.choices((1, 2, 3, 4, 5), (14, 7, 10, 20, 49))[0]


def helpful_votes(rng: random.Random, text: str | None) -> int:
    """Most reviews get no votes; long ones get more, with a heavy tail."""
    if rng.random() < 0.55:
        return 0
    words = len(text.split()) if text else 0
    return min(5000, int(rng.paretovariate(1.4) * (1 + words / 150)) - 1)


def unique_text(seen: set[str], make: Callable[[], str], tries: int = 50) -> str:
    """Generate until the text is new: the only duplicates in the corpus are planted ones."""
    for _ in range(tries):
        text = make()
        if text not in seen:
            seen.add(text)
            return text
    raise RuntimeError("could not generate a unique review text; the phrase banks are too small")


def stock_rating(rng: random.Random, text: str) -> int:
    """A rating that fits a planted stock text ('Arrived damaged.' is not a five)."""
    return rng.choice(next(ratings for t, ratings in STOCK_TEXTS if t == text))


@dataclass
class Row:
    """The generated fields of one row (the id, votes and verified flag come later)."""

    category: str
    product: Product
    rating: int
    text: str | None


def make_row(rng: random.Random, i: int, plan: Plan, seen: set[str]) -> Row:
    """Row i: a planted edge case if the plan says so, otherwise a fresh review."""
    category = rng.choices(list(CATEGORY_WEIGHTS), list(CATEGORY_WEIGHTS.values()))[0]
    row = Row(category, rng.choice(PRODUCTS[category]), pick_rating(rng), None)
    if i in plan.nulls:
        pass
    elif i in plan.blanks:
        row.text = rng.choice(BLANK_TEXTS)
    elif i in plan.duplicates:
        row.text = plan.duplicates[i]
        row.rating = stock_rating(rng, row.text)
    elif i in plan.cjk:
        row.text, row.rating = plan.cjk[i]
    elif i == plan.huge:
        router = next(p for p in PRODUCTS["electronics"] if p.noun == "router")
        row = Row("electronics", router, 1, huge_text(rng))
    else:
        make = functools.partial(review_text, rng, row.category, row.product, row.rating)
        row.text = unique_text(seen, make)
    return row


def build_columns(rows: int, seed: int) -> dict[str, list[object]]:
    """All columns, row by row, from one seeded generator."""
    rng = random.Random(seed)
    plan = plan_edges(rng, rows)
    seen = {t for t, _ in STOCK_TEXTS} | {t for t, _ in CJK_TEXTS}
    columns: dict[str, list[object]] = {name: [] for name in SCHEMA.names}
    for i in range(rows):
        row = make_row(rng, i, plan, seen)
        columns["review_id"].append(f"r{i + 1:06d}")
        columns["product"].append(row.product.name)
        columns["category"].append(row.category)
        columns["rating"].append(row.rating)
        columns["verified"].append(rng.random() < 0.82)
        columns["helpful_votes"].append(helpful_votes(rng, row.text))
        columns["text"].append(row.text)
    return columns


def write(rows: int, seed: int, out: Path) -> pa.Table:
    """Build the table and write it as zstd Parquet; returns the table."""
    table = pa.Table.from_pydict(build_columns(rows, seed), schema=SCHEMA)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Small row groups so readers that stream by row group see more than one batch.
    pq.write_table(table, out, compression="zstd", row_group_size=1000)
    return table


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="rows (default 3000)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed (default 7)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output file (default data/demo/...)"
    )
    args = parser.parse_args(argv)
    if args.rows < 20:
        parser.error("--rows must be at least 20 (room for the planted edge rows)")
    table = write(args.rows, args.seed, args.out)
    size_kb = args.out.stat().st_size / 1024
    print(f"wrote {table.num_rows} reviews (seed {args.seed}) to {args.out} ({size_kb:,.0f} KiB)")


if __name__ == "__main__":
    main()
