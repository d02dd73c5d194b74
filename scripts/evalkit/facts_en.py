"""English templates of what the evaluation plants and asks: facts and their near-miss distractors,
corrections, multi-hop chains, two-turn exchanges and dated events. Questions never copy the
statement's wording (other verbs, other structure); names and the key noun stay, as a person asking would.

Slots as in pools_en, plus fact values: {O} {O2} object, {L} {L2} hiding spot, {J} {J2} job, {X} {X2} fear,
{A} animal, {Name} {Name2} pet names, {AMT} {AMT2} sums, {K} a third person, {S} a relative/partner with
{ss} {sp} {so} {Ss}, {K} with {ks} {kp} {Ks}, {V} {V2} an attribute value, {TIME} a time of day, {B} body part, {FEST} {STORM} anchors.
"""

from __future__ import annotations

FACTS = {
    "hide": {
        "state": ("{N} hid the {O} {L}. {Ns} made me swear not to tell a soul.",
                  "You didn't hear it from me, but {N} tucked the {O} away {L}.",
                  "The {O}? {N} put it {L} before anyone could come looking.",
                  "{N} finally told me where {ns} keeps the {O}: {L}. Don't ask me why there."),
        "ask": ("Where did {N} stash the {O}?", "Do you remember where {N} squirrelled away the {O}?",
                "{N} has the {O} somewhere safe, right? Where exactly?", "Where's the {O} that {N} was guarding?"),
        "near": ("{M} keeps {mp} own {O2} {L2}, wrapped in an old rag.",
                 "{M} was asking whether anyone had seen the {O} lately.",
                 "{N} lost {np} {O2} somewhere near {P} last winter and never found it.",
                 "{N} still won't say why the {O} matters so much to {no}."),
    },
    "job": {
        "state": ("{N} started working as a {J} at {P} this spring. {Ns} says the pay is awful.",
                  "Did you know {N} is a {J} now? Down at {P}, of all places.",
                  "{N} has been a {J} at {P} for years, ever since {np} father got sick."),
        "ask": ("What does {N} do for a living?", "How does {N} earn {np} money these days?",
                "What's {N}'s line of work?"),
        "near": ("{M} used to be a {J} too, before {ms} hurt {mp} back.",
                 "{N}'s cousin has a job at {P}, sweeping floors mostly.",
                 "{N} can't stand the smell of {P2}. {Ns} says it gets into everything.",
                 "{M} works as a {J2} and complains about it from morning to night."),
    },
    "origin": {
        "state": ("{N} grew up in {T}. {Ns} still talks about it when {ns}'s had a drink.",
                  "{N} isn't from around here, you know. {Ns} was born in {T}.",
                  "{N} came here from {T} when {ns} was still a child."),
        "ask": ("Where is {N} originally from?", "Which town did {N} live in as a kid?", "Where was {N} raised?"),
        "near": ("{M} moved here from {T} two winters ago.", "{N} has never been to {T2}, though {ns} keeps saying {ns} will go.",
                 "{N} has a cousin in {T2} who writes once a year.", "{M} says {T} is the dullest town in the world."),
    },
    "fear": {
        "state": ("{N} is terrified of {X}. I saw {no} go white as a sheet once.",
                  "Don't let {N} fool you. {Ns}'s scared to death of {X}.",
                  "{N} will do almost anything, but {ns} won't go near {X}. Never has."),
        "ask": ("What is {N} afraid of?", "Is there anything that frightens {N}?", "What gives {N} the shivers?"),
        "near": ("{M} is scared of {X} too, but {ms} hides it better.", "{N} laughed at {M} for being afraid of {X2}.",
                 "{N} talked about {X2} all evening, as if {ns} were some kind of expert.",
                 "{M} swears {ms} isn't afraid of anything, which is how you know {ms} is."),
    },
    "gift": {
        "state": ("This {O}? {N} gave it to me the night before I left home.",
                  "{N} gave me the {O}. {Ns} said I'd need it more than {ns} would.",
                  "I've had this {O} since {N} pressed it into my hand at {P}, years ago."),
        "ask": ("Who gave you the {O}?", "Where did your {O} come from? Someone gave it to you, didn't they?",
                "Who was it that handed you that {O}?"),
        "near": ("{M} wants to buy the {O} off me. It isn't for sale.", "{N} gave {M} a {O2} for {mp} birthday.",
                 "{K} has a {O} just like mine. {Ks} got it at {P}.", "{N} keeps asking whether I still have the {O2}."),
    },
    "code": {
        "state": ("The lock on the {O} opens with {NUM}. {N} set it, so blame {no} if it jams.",
                  "If you ever need the {O}, the combination is {NUM}. {N} told me.",
                  "{N} changed the code on the {O}. It's {NUM} now."),
        "ask": ("What's the combination for the {O}?", "What numbers open the {O}?", "How do I get into the {O} again?"),
        "near": ("The old lock on {N}'s {O2} used {NUM2}, back when {ns} bothered locking it.",
                 "{M} keeps forgetting the number for the {O}. {Ms} wrote {NUM2} on {mp} hand once, which was wrong.",
                 "{N} says nobody but {no} should open the {O}.", "{M} bought a new lock for the {O2} at {P}."),
    },
    "pet": {
        "state": ("{N}'s {A} is called {Name}. Worst-behaved {A} I've ever met.",
                  "{N} named {np} {A} {Name}, and it answers to it about half the time.",
                  "Have you met {Name}? {N}'s {A}. Bites."),
        "ask": ("What's the name of {N}'s {A}?", "What does {N} call that {A} of {np}s?", "What name did {N} give {np} {A}?"),
        "near": ("{M} has a {A} too, a fat lazy one named {Name2}.", "{N} wants to get a second {A}, heaven help us.",
                 "{K}'s {A} chased {N} halfway down the street.", "{N} says {Name2} is a stupid name for a {A}."),
    },
    "food": {
        "state": ("{N} can't stand {F}. Won't even sit at a table where it's served.",
                  "Never give {N} {F}. {Ns} nearly threw the bowl at me.",
                  "{N} hates {F}. {Ns} says it tastes like punishment."),
        "ask": ("What food does {N} refuse to eat?", "Which dish does {N} loathe?", "Is there something {N} just won't eat?"),
        "near": ("{M} loves {F}. Eats it every single day.", "{N} ordered {F2} again and then complained about it.",
                 "{N} makes a decent {F2}, when {ns} can be bothered.", "{M} swore off {F2} after last winter."),
    },
    "debt": {
        "state": ("{N} still owes {M} {AMT} from that card game.", "{N} borrowed {AMT} from {M} and hasn't paid a penny back.",
                  "{M} lent {N} {AMT}. {Ms} mentions it every time they're in the same room."),
        "ask": ("How much money does {N} owe {M}?", "What's the size of {N}'s debt to {M}?", "How much did {M} lend {N}?"),
        "near": ("{M} owes {K} {AMT2}, so {ms}'s hardly one to talk.", "{N} paid back the {AMT2} {ns} owed {K}. Finally.",
                 "{N} won {AMT2} at cards and lost it the same night.", "{K} says {N} is good for the money. {K} is an optimist."),
    },
}

UPDATES = {
    "meet": {
        "old": ("{N} wants to meet us at {P} {TIME} tomorrow. Don't be late.", "We're meeting {N} at {P} tomorrow, {TIME}."),
        "new": ("Change of plan. {N} sent word: we meet at {P2} now, not {P}.",
                "{N} moved the meeting. It's at {P2} instead. Something about {P} being watched."),
        "ask": ("Where are we supposed to meet {N}?", "Where's the meeting with {N} happening?"),
    },
    "job": {
        "old": ("{N} works as a {J} at {P}. Steady work, {ns} says.", "{N}'s a {J} at {P}, has been for a while."),
        "new": ("{N} quit {P}. {Ns}'s working as a {J2} at {P2} now.", "Big news: {N} walked out on {P}. {Ns}'s a {J2} now, at {P2}."),
        "ask": ("What does {N} do for work these days?", "Where is {N} employed now?"),
    },
    "home": {
        "old": ("{N} rents the little room above {P}.", "{N} lives over {P}. You can hear {no} singing from the street."),
        "new": ("{N} moved out of the room above {P}. {Ns}'s staying near {P2} now.",
                "{N} packed up and left {P}. {Ns} found a place by {P2}."),
        "ask": ("Where is {N} living now?", "Where does {N} sleep these days?"),
    },
    "moved": {
        "old": ("{N} put the {O} {L}. Nobody will find it there.", "The {O} is safe. {N} hid it {L}."),
        "new": ("{N} moved the {O}. It's {L2} now.", "Don't go looking {L}. {N} took the {O} and put it {L2} instead."),
        "ask": ("Where is the {O} now?", "Where would I find the {O} today?"),
    },
    "partner": {
        "old": ("{N} and {M} are courting. Everyone pretends not to notice.", "{N} has been seeing {M} for a month now."),
        "new": ("{N} and {M} are finished. {Ns}'s walking out with {K} now.", "{N} broke it off with {M}. It's {K} now, apparently."),
        "ask": ("Who is {N} seeing these days?", "Who's {N} with now?"),
    },
    "ooc_fix": {  # the story said {V}; the user corrects it out of character
        "old": ("*{N}'s {V} eyes narrow as {ns} reads the letter a second time.*",
                "*{N} turns, {np} {V} eyes catching the lamplight.*"),
        "new": ("(OOC: small fix, {N}'s eyes are {V2}, not {V}.)", "((continuity note: {N} has {V2} eyes, not {V}))"),
        "ask": ("What colour are {N}'s eyes?", "What's the colour of {N}'s eyes?"),
    },
    "ooc_hair": {
        "old": ("*{N} pushes {np} {V} hair out of {np} face and sighs.*", "*Wind tugs at {N}'s {V} hair.*"),
        "new": ("(OOC: quick correction, {N}'s hair is {V2}, not {V}.)", "// tiny thing: {N} has {V2} hair, not {V}"),
        "ask": ("What colour is {N}'s hair?", "What's {N}'s hair colour?"),
    },
}
EYE_COLOURS = ("blue", "green", "grey", "brown", "hazel", "amber")
HAIR_COLOURS = ("black", "red", "blond", "brown", "grey", "auburn")
TIMES = ("at dusk", "at noon", "at midnight", "first thing in the morning", "just after sunset")

MULTIHOP = {
    "family": {  # {S} is {N}'s sibling; {REL2} a parent
        "parts": ("{N}'s {REL} {S} {INTRO}.", "{S} {INJ} yesterday. {Ss}'ll be fine, but it looked bad.",
                  "{N}'s {REL2} {INJ2}."),
        "ask": ("Who in {N}'s family got hurt recently, and how?", "Has anyone in {N}'s family been injured lately?"),
    },
    "seller": {
        "parts": ("I bought this {O} from {S} at {P}. Paid too much, probably.", "{S} is a {J}. Has been for twenty years."),
        "ask": ("What does the person who sold you the {O} do for work?",),
    },
    "searched": {
        "parts": ("We searched {P} for the {O} this morning. Nothing but dust.", "No sign of the {O} at {P2} either.",
                  "I turned {P3} upside down looking for the {O}. It isn't there."),
        "ask": ("Where have we already looked for the {O}?", "Which places did we check for the {O}?"),
    },
    "roommate": {
        "parts": ("{N} shares a room with {S} over by {P}.", "{S} plays the {INSTR} at {P2} most nights. Badly, but loudly."),
        "ask": ("What instrument does {N}'s roommate play?",),
    },
    "hometown": {
        "parts": ("{N} was born in {T}, though {ns} doesn't like to talk about it.",
                  "{T}? The only thing it's famous for is {FAME}."),
        "ask": ("What is {N}'s hometown known for?",),
    },
}
RELATIVES = {"f": "younger sister", "m": "little brother"}
PARENTS = (("father", "m"), ("mother", "f"), ("uncle", "m"), ("grandmother", "f"))
INTROS = ("works at {P}", "just came back from {T}", "helps out at {P} on market days", "is the clever one in the family")
INJURIES = ("twisted {sp} ankle on the steps of {P}", "broke two fingers in a slammed door", "burned {sp} arm at {P}",
            "cracked a rib falling off a ladder", "sprained {sp} wrist hauling crates at {P}",
            "got a nasty cut across {sp} forehead")
PARENT_INJURIES = ("put {rp} back out lifting a barrel at {P}", "slipped on the ice and broke {rp} wrist",
                   "hurt {rp} knee badly at {P} and can barely walk", "came down with a fever after a fall at {P}")

CONTEXT = {
    "scar": {
        "ask_turn": ("*I nod at the scar on your {B}.* \"How did you get that, anyway?\"",
                     "\"That scar on your {B}. You never told me where it came from.\""),
        "answers": ("A fishhook, when I was nine. My brother laughed so hard he fell off the jetty.",
                    "A dog bit me when I tried to steal its dinner. I was six, and I deserved it.",
                    "Broken glass. I put my hand through a window to get a cat out. The cat was fine.",
                    "A knife fight, if you want the exciting version. A kitchen accident, if you want the true one."),
        "ask": ("How did you end up with the mark on your {B}?",),
        "values": ("wrist", "chin", "left hand", "eyebrow", "collarbone", "knuckles"),
    },
    "keepsake": {
        "ask_turn": ("\"That {B} you always wear. Where's it from?\"", "*I point at your {B}.* \"You never take that off. Why?\""),
        "answers": ("My grandmother's. She wore it through two wars and one very bad marriage.",
                    "I won it at cards from a sailor who cried when he lost. I still feel a little guilty.",
                    "A friend made it for me before she left for good. I haven't heard from her since.",
                    "My father's. It's the only thing of his I kept."),
        "ask": ("What's the story behind the {B} you never take off?",),
        "values": ("ring", "bracelet", "scarf", "pendant", "hat", "earrings"),
    },
    "opinion": {
        "ask_turn": ("\"What do you actually think of {N}?\"", "*I lower my voice.* \"Be honest. What's your take on {N}?\""),
        "answers": ("Honestly? I wouldn't trust {no} to hold a spoon. {Ns} cheated my father at cards years ago.",
                    "I like {no} more than I'll ever admit. {Ns} pulled me out of the river once.",
                    "{Ns} owes me money and an apology, and I've given up on both.",
                    "We grew up on the same street. I know exactly what {ns}'s capable of, good and bad."),
        "ask": ("What's your history with {N}?",),
    },
    "trip": {
        "ask_turn": ("\"Have you ever been to {T}?\"", "*I look up from the map.* \"Did you ever go to {T}?\""),
        "answers": ("Once. I was sick the whole way there and swore I'd never go back.",
                    "Twice. The second time I got arrested, which is a long story.",
                    "For a summer. I fell in love, it rained every day, and I came home poorer.",
                    "Only passing through. Someone stole my boots while I slept."),
        "ask": ("What happened when you went to {T}?",),
    },
    "fix": {
        "ask_turn": ("\"What are we going to do about the {B}?\"", "*I glare at the {B}.* \"Who do we even call for this?\""),
        "answers": ("Ask {M}. {Ms} owes me, and {ms} has the tools.", "{M} can sort it. Bring {mo} something to drink.",
                    "Leave it to {M}. {Ms} fixed the last one in an afternoon."),
        "ask": ("Who did you say could repair the {B}?",),
        "values": ("leaking roof", "broken cart wheel", "jammed lock", "cracked window", "smoking chimney"),
    },
    "skill": {
        "ask_turn": ("\"Where did you learn to {B}?\"", "*I watch you for a moment.* \"Who taught you to {B}?\""),
        "answers": ("My uncle, mostly by shouting at me.", "{M} taught me, the summer I was fourteen.",
                    "Nobody. I watched people do it badly and then did the opposite.",
                    "An old woman who lived below us. She'd hit my knuckles with a spoon when I got it wrong."),
        "ask": ("Who showed you how to {B}?",),
        "values": ("throw a knife like that", "cook like this", "swim", "pick locks", "play cards that well",
                   "tie knots that fast"),
    },
}

SERIES = {
    "mishap": {  # {N} and their events
        "events": ("fell off the roof of {P}", "cut {np} hand badly on a broken bottle", "had {np} boots stolen at {P}",
                   "lost a tooth in a brawl at {P}", "slipped on the steps of {P} and cracked a rib",
                   "got bitten by a dog outside {P}", "singed {np} eyebrows off lighting a stove",
                   "got locked in at {P} overnight", "lost {np} purse at {P}", "got into a shouting match with {M} at {P}"),
        "today": ("{N} {EV} this morning. {Ns}'s fine, mostly, but {ns} won't stop talking about it.",
                  "Did you hear? {N} {EV} today.", "{N} {EV} earlier. I swear, some people."),
        "yesterday": ("{N} {EV} yesterday. I only heard about it this morning.",
                      "Yesterday {N} {EV}, and {ns}'s still sulking about it."),
        "ask": ("What happened to {N} {DATE}?", "What went wrong for {N} {DATE}?", "{N} had a bad day {DATE}. What happened?"),
    },
    "purchase": {
        "events": ("copper kettle", "wool blanket", "new lantern", "jar of honey", "pair of boots",
                   "sack of apples", "little clay pipe", "painted cup", "length of green ribbon", "bag of nails"),
        "today": ("At least the {EV} we got at {MARKET} this morning was worth the money.",
                  "I'm still pleased with the {EV} we picked up at {MARKET} today."),
        "yesterday": ("The {EV} we bought at {MARKET} yesterday is already my favourite thing in the house.",
                      "Remember the {EV} from {MARKET} yesterday? Best thing we've bought in ages."),
        "ask": ("What did we buy at {MARKET} {DATE}?", "What did we come home with from {MARKET} {DATE}?"),
    },
    "letter": {
        "events": ("{ns}'s getting married in the spring", "{np} shop burned down, though nobody was hurt",
                   "{ns}'s coming back to {T} next month", "{ns} had a baby girl", "{ns} found work in {T}",
                   "{np} mother is very ill", "{ns} won a prize at the {T} fair", "{ns}'s been robbed on the road"),
        "today": ("A letter came from {N} today. {EV_cap}.", "{N} finally wrote. The letter came this morning: {EV}."),
        "yesterday": ("{N}'s letter arrived yesterday. {EV_cap}.", "I didn't tell you yesterday, but {N} wrote: {EV}."),
        "ask": ("What was the news in {N}'s letter {DATE}?", "What did {N} write to us about {DATE}?"),
    },
}
ANCHOR_LINES = {
    "festival": ("{FEST_cap} is tonight. The whole town is out, and I intend to eat something on a stick.",
                 "*Music and lanterns everywhere; {FEST} is in full swing.* \"Stay close, it's packed.\"",
                 "I lost you for a minute in the crowd at {FEST}. Don't do that again."),
    "storm": ("{STORM_cap} is right on top of us tonight. Stay away from the windows.",
              "Listen to that wind. {STORM_cap} is the worst I've seen in years, and it's not letting up."),
}
LOCKABLES = ("strongbox", "old trunk", "cellar door", "cash box", "tool locker", "iron chest")
ANCHOR_ASK = {"festival": "the day after {FEST}", "storm": "the day before {STORM}"}
