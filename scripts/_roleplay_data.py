"""Realistic roleplay chats for the ingest benchmark and the embedding-model comparison.

Seeded and a pure function of (seed, index). Messages read like roleplay: narration, actions and
dialogue; users write 40-120 tokens, characters 180-420 (mean about 190 tokens a message, counted with
the product's tiktoken counter). About a third of the messages are Chinese. The same cast, places and
objects recur everywhere, so distractors share names and words with the message a query looks for.

Some messages carry a planted *fact* at a random place (start, middle or end of the message). Each fact
comes with paraphrased questions that share few words with it ("hid ... beneath a loose floorboard" is
asked as "where did she conceal it"), which is what a dense model is for; `retrieval_task` returns
such (question, message index) pairs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random

PERSONA = "Alex"
CAST_EN = ("Mira", "Kael", "Seraphine", "Tobin", "Lyra", "Garrick", "Elowen", "Dorian")
CAST_ZH = ("林晚", "沈砚", "苏念", "陆川", "白露", "顾言", "叶蓁", "江离")
PLACES_EN = ("the lighthouse", "the harbor tavern", "the old library", "the pine forest", "the cathedral",
             "the night market", "the abandoned mine", "the palace garden", "the mountain pass", "the monastery")
PLACES_ZH = ("灯塔", "港口酒馆", "旧图书馆", "松林", "大教堂", "夜市", "废弃矿井", "王宫花园", "山口", "修道院")
OBJECTS_EN = ("silver key", "brass compass", "sealed letter", "jade ring", "iron dagger", "leather journal",
              "music box", "old map", "glass vial", "wooden flute")
OBJECTS_ZH = ("银钥匙", "铜罗盘", "密封的信", "玉戒指", "铁匕首", "皮面日记", "音乐盒", "旧地图", "玻璃药瓶", "木笛")

NARRATION_EN = (
    "{a} leaned against the cold stone wall of {place}, listening to the wind worry at the shutters.",
    "Rain drummed on the roof of {place} while {a} counted the coins in a thin purse twice over.",
    "The lantern light flickered, throwing long shadows across {b}'s tired face.",
    "{a} traced the scratches on the table with one finger, lost in thought for a long moment.",
    "Somewhere outside a dog barked, and {b} glanced toward the door as if expecting someone.",
    "The smell of wet earth and woodsmoke drifted in through the cracked window of {place}.",
    "{a} pulled the cloak tighter and stepped over a puddle that reflected the grey sky.",
    "A bell rang in the distance, three slow strokes, and the crowd at {place} began to thin.",
    "{b} poured two cups of bitter tea and slid one across the table without a word.",
    "The floorboards creaked under {a}'s boots as the old building settled into the night.",
    "For a while neither of them spoke; the fire crackled and the kettle hissed softly.",
    "{a} studied the {obj} in the candlelight, turning it slowly as if it might confess something.",
    "Gulls cried over the water, and the tide pulled at the mooring ropes below {place}.",
    "{b} laughed, but the sound was thin and did not reach the eyes.",
    "Dust hung in a slanted beam of sunlight, and the whole room of {place} felt older than it was.",
    "{a} rubbed a sore shoulder, still aching from the long ride through the hills.",
    "The innkeeper shouted for more bread, and a boy ran past carrying a basket of apples.",
    "Frost had gathered at the edges of the glass, and every breath came out as a faint cloud.",
    "{b} unrolled a worn blanket by the hearth and sat down with a heavy sigh.",
    "Far above {place}, the first stars pricked through a sky the colour of bruised plums.",
    "{a} hummed an old travelling song under the breath, half forgetting the words.",
    "A cart rattled past on the cobbles, its wheels squealing for want of grease.",
    "{b} kept one hand near the belt, where a knife usually hung, out of old habit.",
    "The candle guttered and went out, and {a} fumbled in the dark for the tinderbox.",
)
DIALOGUE_EN = (
    "\"You look like you haven't slept in days,\" {b} said, raising an eyebrow at {a}.",
    "\"We should leave before the guards change shifts,\" {a} whispered.",
    "\"I don't trust that merchant. He smiles too much,\" {b} muttered.",
    "\"Tell me the truth this time, {a}. All of it,\" {b} said quietly.",
    "\"If we wait any longer, the road north will be snowed in,\" {a} warned.",
    "\"Do you remember the song your mother used to sing?\" {b} asked, almost shyly.",
    "\"I'm fine. Really. It's just the weather,\" {a} insisted, not very convincingly.",
    "\"Stay close to me in the crowd, and keep your hood up,\" {b} murmured.",
    "\"We owe {c} a favour, and I hate owing favours,\" {a} grumbled.",
    "\"Whatever happens tomorrow, I'm glad you came,\" {b} admitted.",
    "\"Eat something first. You can't plan on an empty stomach,\" {a} said.",
    "\"That's the third time today someone has asked about {c},\" {b} noted.",
)
USER_EN = (
    "I sit down across from {a} and wait for an answer.", "\"So what do we do now?\" I ask.",
    "I hand {a} a cup of tea and glance out the window.", "I nod slowly, thinking it over.",
    "\"Let's rest here tonight and move at dawn,\" I suggest.", "I check my pack again, making sure nothing is missing.",
    "\"Who else knows about this?\" I ask quietly.", "I follow {a} through the narrow street toward {place}.",
    "I laugh despite myself.", "\"You always say that,\" I reply with a tired smile.",
)
NARRATION_ZH = (
    "{a}靠在{place}冰冷的石墙上，听着风一下一下地拍打着窗板。",
    "雨点敲在{place}的屋顶上，{a}把钱袋里的铜板又数了一遍。",
    "油灯的光晃了晃，在{b}疲惫的脸上投下长长的影子。",
    "{a}用指尖沿着桌上的划痕慢慢描着，好一会儿都没有说话。",
    "窗外传来几声狗叫，{b}下意识地朝门口看了一眼，像是在等什么人。",
    "潮湿的泥土味和柴火的烟味从{place}裂开的窗缝里飘了进来。",
    "{a}把斗篷裹紧，跨过地上那滩映着灰色天空的积水。",
    "远处的钟响了三下，{place}的人群渐渐散去。",
    "{b}倒了两杯苦茶，一言不发地把其中一杯推了过去。",
    "{a}踩在地板上，旧木头吱呀作响，整座房子仿佛在夜里叹气。",
    "两个人都没有再开口，只有炉火噼啪作响，水壶轻轻地冒着气。",
    "{a}借着烛光端详那{obj}，慢慢转动着，好像它会自己说出什么秘密。",
    "海鸥在水面上盘旋鸣叫，潮水拉扯着{place}下面的缆绳。",
    "{b}笑了一声，可那笑意并没有到达眼底。",
    "一束斜斜的阳光里浮着灰尘，{place}显得比实际上更加古老。",
    "{a}揉了揉酸痛的肩膀，那是穿过山丘的长途骑行留下的。",
    "掌柜的大声喊着要再添些面包，一个少年抱着一篮苹果从旁边跑过。",
    "霜花爬满了窗玻璃的边缘，每一次呼吸都化成一团淡淡的白雾。",
    "{b}在火炉边铺开一条旧毯子，重重地叹了口气坐了下来。",
    "{place}的上空，第一颗星星刺破了紫灰色的天幕。",
)
DIALOGUE_ZH = (
    "“你看起来好几天没睡了。”{b}挑了挑眉，对{a}说。",
    "“我们得在守卫换班之前离开。”{a}压低声音说。",
    "“我不信那个商人，他笑得太多了。”{b}嘀咕道。",
    "“这次跟我说实话，{a}，全部都说。”{b}轻声说。",
    "“再等下去，北边的路就要被雪封住了。”{a}提醒道。",
    "“你还记得你母亲以前唱的那首歌吗？”{b}有些腼腆地问。",
    "“我没事，真的，只是天气的缘故。”{a}坚持说，听起来却没什么说服力。",
    "“人多的时候跟紧我，把兜帽戴好。”{b}低声叮嘱。",
    "“我们欠{c}一个人情，我最讨厌欠人情。”{a}抱怨道。",
    "“不管明天发生什么，我都很高兴你来了。”{b}承认道。",
)
USER_ZH = (
    "我在{a}对面坐下，等着答案。", "“那我们现在怎么办？”我问。", "我递给{a}一杯茶，朝窗外看了一眼。",
    "我慢慢点了点头，仔细想了想。", "“今晚就在这里休息，天亮再走吧。”我提议。", "我又检查了一遍行囊，确认什么都没落下。",
    "“还有谁知道这件事？”我小声问。", "我跟着{a}穿过狭窄的街道，朝{place}走去。",
)

# Facts: (statement, paraphrased questions) in English and in Chinese. Slots: a, b, obj, place.
FACTS_EN = (
    ("{a} slipped the {obj} beneath a loose floorboard in {place} so that {b} would never find it.",
     ("Where did {a} conceal the {obj} to keep it away from {b}?", "What hiding spot did {a} choose for the {obj}?")),
    ("{a} confessed to {b} that the fire at {place} years ago had been no accident, but something {a} had set.",
     ("Who admitted to starting the blaze at {place}?", "What did {a} reveal about how that old fire began?")),
    ("{a} traded the {obj} to a one-eyed smuggler in exchange for passage on a ship heading south.",
     ("What did {a} give up to buy a voyage south?", "Who ended up with the {obj} after {a} bargained for a boat?")),
    ("{a} is terrified of deep water ever since nearly drowning as a child in the river behind {place}.",
     ("Why is {a} afraid of swimming?", "What childhood accident left {a} scared of the sea?")),
    ("{a} promised {b} to meet again at {place} on the first night of the winter festival.",
     ("When and where did {a} and {b} agree to see each other next?", "What rendezvous did {a} arrange with {b}?")),
    ("{a} discovered that the {obj} was a forgery: the real one had been sold long before anyone noticed.",
     ("Was the {obj} genuine?", "What did {a} find out about the {obj} being fake?")),
    ("{a} owes {b} forty gold crowns from a card game that went badly at {place}.",
     ("How much money does {a} owe {b}, and why?", "What gambling debt is {a} still carrying?")),
    ("{a} was born in a small fishing village that was later swallowed by the sea during a great storm.",
     ("Where does {a} come from originally?", "What happened to {a}'s hometown?")),
    ("{a} poisoned the wine meant for {b}, but {b} switched the cups at the last moment without knowing.",
     ("Who tried to kill {b} with a drugged drink?", "How did {b} survive the tainted wine?")),
    ("{a} keeps a lock of {b}'s hair inside the {obj} and never lets anyone open it.",
     ("What keepsake does {a} hide inside the {obj}?", "Why won't {a} let anybody look inside the {obj}?")),
    ("{a} lost two fingers of the left hand in a duel with a mercenary captain outside {place}.",
     ("How did {a} get that injured hand?", "Who maimed {a} in a sword fight?")),
    ("{a} secretly learned to read from the monks at {place}, and hides the skill from everyone.",
     ("Can {a} read, and who taught that?", "What secret education did {a} receive?")),
)
FACTS_ZH = (
    ("{a}把{obj}藏在{place}一块松动的地板下面，这样{b}就永远找不到。",
     ("{a}把{obj}藏到哪里去了，不让{b}发现？", "{a}为{obj}选了什么样的藏身之处？")),
    ("{a}向{b}坦白，多年前{place}的那场大火不是意外，而是{a}亲手放的。",
     ("是谁承认在{place}纵火的？", "关于那场旧火灾是怎么开始的，{a}说了什么？")),
    ("{a}把{obj}卖给了一个独眼走私贩，换来一张南下的船票。",
     ("{a}用什么换了去南方的船位？", "{a}讨价还价之后，{obj}落到了谁手里？")),
    ("{a}小时候差点在{place}后面的河里淹死，从此非常害怕深水。",
     ("{a}为什么怕游泳？", "童年的什么意外让{a}害怕大海？")),
    ("{a}答应{b}，在冬节的第一个夜晚于{place}再次相见。",
     ("{a}和{b}约好下次什么时候在哪里见面？", "{a}跟{b}定下了什么约会？")),
    ("{a}发现那{obj}是赝品，真的早就被人卖掉了，却一直没人察觉。",
     ("那{obj}是真的吗？", "{a}发现{obj}是假的这件事是怎么回事？")),
    ("{a}在{place}的一场牌局里输给了{b}，至今还欠着四十枚金币。",
     ("{a}欠{b}多少钱，为什么？", "{a}身上还背着什么赌债？")),
    ("{a}把{b}的一缕头发藏在{obj}里，从不让任何人打开。",
     ("{a}在{obj}里藏着什么纪念物？", "为什么{a}不许任何人看{obj}里面？")),
)


def _seeded(*parts) -> random.Random:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "little"))


@dataclasses.dataclass
class RoleplayMessage:
    index: int
    role: str
    name: str
    text: str
    zh: bool
    fact: tuple[int, dict] | None     # (fact number, slots) when the message carries a planted fact
    fact_at: str | None               # "start" | "middle" | "end"

    def as_sync(self) -> dict:
        return {"index": self.index, "role": self.role, "name": self.name, "text": self.text}


class RoleplayChat:
    """One seeded chat; `message(i)` is a pure function of (seed, i)."""

    def __init__(self, seed: int = 7, fact_rate: float = 0.15):
        self.seed = seed
        self.fact_rate = fact_rate

    def message(self, index: int) -> RoleplayMessage:
        rng = _seeded(self.seed, "rp", index)
        zh = rng.random() < 0.35
        role = "user" if index % 2 == 0 else "assistant"
        cast = CAST_ZH if zh else CAST_EN
        places, objects = (PLACES_ZH, OBJECTS_ZH) if zh else (PLACES_EN, OBJECTS_EN)
        a, b, c = rng.sample(cast, 3)
        name = PERSONA if role == "user" else a
        slots = {"a": a, "b": b, "c": c, "place": rng.choice(places), "obj": rng.choice(objects)}
        if role == "user":
            pool = USER_ZH if zh else USER_EN
            count = rng.randint(2, 5) if zh else rng.randint(3, 7)
        else:
            pool = (NARRATION_ZH + DIALOGUE_ZH) if zh else (NARRATION_EN + DIALOGUE_EN)
            count = rng.randint(6, 12) if zh else rng.randint(8, 15)
        sentences = []
        for _ in range(count):
            sentence_slots = dict(slots, a=rng.choice((a, a, b)), b=rng.choice((b, b, c)))
            sentences.append(rng.choice(pool).format(**sentence_slots))
        fact = fact_at = None
        if role == "assistant" and rng.random() < self.fact_rate:
            facts = FACTS_ZH if zh else FACTS_EN
            number = rng.randrange(len(facts))
            fact_slots = {"a": a, "b": b, "obj": slots["obj"], "place": slots["place"]}
            fact_at = rng.choice(("start", "middle", "end"))
            at = {"start": 0, "middle": len(sentences) // 2, "end": len(sentences)}[fact_at]
            sentences.insert(at, facts[number][0].format(**fact_slots))
            fact = (number, fact_slots)
        sep = "" if zh else " "
        paragraphs = [sep.join(sentences[i:i + 4]) for i in range(0, len(sentences), 4)]
        return RoleplayMessage(index, role, name, "\n\n".join(paragraphs), zh, fact, fact_at)

    def retrieval_task(self, count: int, seed: int = 0) -> list[tuple[str, int, str]]:
        """(question, index of the message holding the answer, where the fact sits) for the messages
        0..count-1 that carry a fact; one paraphrased question each, chosen by seed."""
        out = []
        for i in range(count):
            msg = self.message(i)
            if msg.fact is None:
                continue
            number, slots = msg.fact
            questions = (FACTS_ZH if msg.zh else FACTS_EN)[number][1]
            question = _seeded(self.seed, "q", seed, i).choice(questions).format(**slots)
            out.append((question, i, msg.fact_at))
        return out
