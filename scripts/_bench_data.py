"""Synthetic roleplay chats for the benchmarks: seeded messages, memories, queries and vectors.

Everything is a pure function of (seed, index), so a process can regenerate any message or the
query set without holding the whole chat. About one sentence in five is Chinese, so the lexical
index's CJK bigram path is exercised.

Vectors come from `VectorModel`, a cheap stand-in for multilingual-e5-small (384-d): a bag of
hashed token vectors, where places and their typical objects share a topic centroid (clusters), plus
per-text noise, plus one component shared by every text. The shared component reproduces e5's
anisotropy (unrelated texts score about 0.75, related ones 0.8 to 0.9), so the recall path's
similarity gate behaves roughly as with the real model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random

import numpy as np

from stbme.embed.base import Embedder
from stbme.hashing import chain_hash, message_hash
from stbme.index.lexical import tokenize

DIM = 384
PERSONA = "Alex"

CHARACTERS_EN = ("Mira", "Kael", "Aldric", "Seraphine", "Tobin", "Lyra", "Garrick", "Elowen", "Dorian", "Nyx",
                 "Rowan", "Isolde", "Bram", "Talia", "Corvin", "Ysolde", "Fenwick", "Astrid", "Jorah", "Vesper")
CHARACTERS_ZH = ("林晚", "沈砚", "苏念", "陆川", "白露", "顾言", "叶蓁", "江离", "温衡", "秦羽")

# One topic per place: a memory's place decides most of its objects, which gives the vectors clusters.
PLACES = (
    ("tavern", "酒馆"), ("harbor", "港口"), ("library", "图书馆"), ("forest", "森林"), ("cathedral", "大教堂"),
    ("market", "集市"), ("lighthouse", "灯塔"), ("mine", "矿井"), ("palace", "王宫"), ("academy", "学院"),
    ("swamp", "沼泽"), ("desert outpost", "沙漠哨站"), ("bridge", "石桥"), ("watchtower", "瞭望塔"),
    ("orchard", "果园"), ("smithy", "铁匠铺"), ("monastery", "修道院"), ("catacombs", "地下墓穴"),
    ("garden", "花园"), ("barracks", "兵营"), ("merchant ship", "商船"), ("village square", "村口广场"),
    ("observatory", "观星台"), ("dungeon", "地牢"), ("inn", "客栈"), ("mountain pass", "山口"),
    ("ruins", "遗迹"), ("farm", "农庄"), ("bathhouse", "澡堂"), ("theatre", "剧院"), ("river ford", "渡口"),
    ("archive", "档案馆"), ("greenhouse", "温室"), ("camp", "营地"), ("chapel", "小礼拜堂"),
    ("alchemist shop", "炼金铺"), ("throne room", "王座厅"), ("docks", "码头"), ("cliffs", "悬崖"),
    ("cellar", "地窖"),
)
OBJECTS = (
    ("sword", "剑"), ("lantern", "灯笼"), ("map", "地图"), ("letter", "信"), ("key", "钥匙"), ("compass", "罗盘"),
    ("ring", "戒指"), ("dagger", "匕首"), ("book", "书"), ("potion", "药水"), ("coin purse", "钱袋"),
    ("cloak", "斗篷"), ("amulet", "护身符"), ("crown", "王冠"), ("bow", "长弓"), ("scroll", "卷轴"),
    ("wine", "葡萄酒"), ("bread", "面包"), ("herbs", "草药"), ("shield", "盾牌"), ("mirror", "镜子"),
    ("candle", "蜡烛"), ("rope", "绳子"), ("horse", "马"), ("boat", "小船"), ("violin", "小提琴"),
    ("painting", "油画"), ("feather", "羽毛"), ("seal", "印章"), ("locket", "吊坠"), ("chest", "箱子"),
    ("hammer", "锤子"), ("pickaxe", "镐"), ("telescope", "望远镜"), ("journal", "日记"), ("ledger", "账本"),
    ("tea", "茶"), ("medicine", "药"), ("bandage", "绷带"), ("armor", "盔甲"), ("helmet", "头盔"),
    ("spear", "长矛"), ("crossbow", "弩"), ("arrow", "箭"), ("gemstone", "宝石"), ("pearl", "珍珠"),
    ("silk", "丝绸"), ("clock", "座钟"), ("pocket watch", "怀表"), ("flute", "笛子"), ("chess set", "棋盘"),
    ("dice", "骰子"), ("cards", "纸牌"), ("skull", "头骨"), ("relic", "圣物"), ("idol", "神像"),
    ("banner", "旗帜"), ("torch", "火把"), ("oil lamp", "油灯"), ("blanket", "毯子"), ("boots", "靴子"),
    ("gloves", "手套"), ("mask", "面具"), ("crystal", "水晶"), ("orb", "法球"), ("staff", "法杖"),
    ("wand", "魔杖"), ("quill", "羽毛笔"), ("ink", "墨水"), ("parchment", "羊皮纸"), ("anchor", "锚"),
    ("net", "渔网"), ("fish", "鱼"), ("apple", "苹果"), ("honey", "蜂蜜"), ("salt", "盐"), ("spices", "香料"),
    ("pipe", "烟斗"), ("bell", "铃铛"), ("chain", "锁链"), ("padlock", "挂锁"), ("trap", "陷阱"),
    ("poison", "毒药"), ("antidote", "解药"), ("bracelet", "手镯"), ("necklace", "项链"), ("ribbon", "丝带"),
    ("doll", "人偶"), ("music box", "音乐盒"), ("lute", "鲁特琴"), ("drum", "鼓"), ("cart", "马车"),
    ("saddle", "马鞍"), ("tent", "帐篷"), ("kettle", "水壶"), ("knife", "小刀"), ("axe", "斧头"),
    ("saw", "锯子"), ("nails", "钉子"), ("coal", "煤"), ("iron ore", "铁矿石"), ("gold bar", "金条"),
    ("silver spoon", "银勺"), ("teacup", "茶杯"), ("vase", "花瓶"), ("rose", "玫瑰"), ("lily", "百合"),
    ("seeds", "种子"), ("egg", "蛋"), ("pillow", "枕头"), ("portrait", "肖像"), ("statue", "雕像"),
    ("tapestry", "挂毯"), ("banner pole", "旗杆"), ("wax seal", "火漆"), ("hourglass", "沙漏"), ("bones", "骨头"),
)
VERBS = (
    ("took", "拿走"), ("hid", "藏起"), ("broke", "打碎"), ("repaired", "修好"), ("sold", "卖掉"), ("stole", "偷走"),
    ("examined", "检查"), ("buried", "埋下"), ("polished", "擦亮"), ("returned", "归还"), ("lost", "弄丢"),
    ("found", "找到"), ("traded", "交换"), ("carried", "带走"), ("dropped", "扔下"), ("guarded", "守护"),
    ("burned", "烧掉"), ("opened", "打开"), ("painted", "画下"), ("weighed", "称量"), ("counted", "清点"),
    ("offered", "献上"), ("borrowed", "借走"), ("forged", "锻造"), ("enchanted", "附魔"), ("cleaned", "清洗"),
    ("wrapped", "包好"), ("delivered", "送去"), ("searched", "搜查"), ("sketched", "描绘"),
)
ADJECTIVES = (
    ("old", "古老的"), ("rusty", "生锈的"), ("silver", "银色的"), ("cracked", "破裂的"), ("heavy", "沉重的"),
    ("tiny", "小小的"), ("glowing", "发光的"), ("bloodstained", "染血的"), ("golden", "金色的"),
    ("worn", "磨旧的"), ("cursed", "被诅咒的"), ("fragile", "易碎的"), ("forbidden", "禁忌的"),
    ("hidden", "隐藏的"), ("strange", "奇怪的"), ("ornate", "华丽的"), ("crooked", "歪斜的"),
    ("familiar", "熟悉的"), ("frozen", "冰冷的"), ("sacred", "神圣的"), ("humble", "朴素的"),
    ("enormous", "巨大的"), ("burnt", "烧焦的"), ("beautiful", "美丽的"),
)
TEMPLATES_EN = (
    "{a} {verb} the {adj} {obj} at the {place}.",
    "At the {place}, {a} told {b} about the {obj}.",
    "{a} {verb} a {adj} {obj} near the {place} and kept it from {b}.",
    "{a} and {b} argued about the {obj} until dawn at the {place}.",
    "\"Where is the {obj}?\" {a} asked {b} quietly in the {place}.",
    "{a} promised {b} to bring the {adj} {obj} back to the {place} before nightfall.",
    "Nobody at the {place} noticed when {a} {verb} the {obj}.",
)
TEMPLATES_ZH = (
    "{a}在{place}{verb}了{adj}{obj}。",
    "{a}告诉{b}，{place}里藏着一件{adj}{obj}。",
    "在{place}，{a}和{b}为了{obj}争吵到天亮。",
    "“{obj}在哪里？”{a}在{place}低声问{b}。",
    "{a}答应{b}，天黑之前把{obj}送回{place}。",
)
RARE_EN = (
    "The {obj} once belonged to {rare}, who vanished near the {place}.",
    "{a} remembered what {rare} had said about the {adj} {obj}.",
    "{b} swore that {rare} was waiting at the {place} with the {obj}.",
)
RARE_ZH = (
    "{a}想起{rare}曾经提到过那{obj}。",
    "{b}说{rare}在{place}等着，手里拿着{obj}。",
)
SMALL_TALK_EN = (
    "How are you feeling tonight, honestly?", "Shall we talk about the {oov} weather for a while?",
    "Tell me something nice about {oov}.", "What would you do if it rained {oov} all week?",
    "I keep thinking about {oov}; does that sound silly?", "Let's just rest here for a moment.",
)
SMALL_TALK_ZH = ("今天的天气怎么样？", "你最近心情好吗？", "我们休息一下吧。", "你听说过{oov}吗？")
CORE_MEMORIES = (
    ("synopsis", {"summary": "A long journey across the kingdom: Alex travels with Mira and Kael, chasing the "
                             "people who stole the silver compass, while old debts follow them from town to town."}),
    ("rule", {"title": "Magic has a price", "constraint": "Every spell costs the caster a memory of their own."}),
    ("rule", {"title": "No resurrection", "constraint": "The dead stay dead; no spell or relic brings them back."}),
    ("preference", {"content": "Keep Kael sarcastic but loyal; never make him betray the party."}),
)

_SYL_ON = ("k", "v", "th", "dr", "z", "qu", "br", "sh", "m", "l", "gr", "x", "t", "n")
_SYL_VOW = ("a", "e", "i", "o", "u", "ae", "ou", "y")
_SYL_CODA = ("r", "n", "th", "x", "l", "sk", "rn", "v", "")
_ZH_CHARS = ("玄霁沧溟青岚墨璃昭珩瑾瑜曦月朔夜凌霜星河云岫烟雨松柏竹梅兰菊琴瑟笙箫鸿鹄鹤鸾凤麟"
             "翎羽锦绣琼瑶珏璧琥珀翡翠苍穹渊澜潮汐岳峰崖谷泉溪涧湖泊洲屿汀渚")


def _seeded(*parts) -> random.Random:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "little"))


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


def _invented_words(rng: random.Random, count: int, capitalise: bool, exclude: set[str] = frozenset()) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < count:
        word = "".join(rng.choice(_SYL_ON) + rng.choice(_SYL_VOW) + rng.choice(_SYL_CODA)
                       for _ in range(rng.choice((2, 2, 3))))
        if len(word) >= 5 and word not in exclude:
            words[word.capitalize() if capitalise else word] = None
    return list(words)


@dataclasses.dataclass
class Message:
    index: int
    role: str
    name: str
    text: str
    topic: int
    participants: list[str]
    rare: str | None  # the rare name this message mentions, if any
    obj: str          # one object it mentions (English or Chinese, as in the text)

    def as_sync(self) -> dict:
        return {"index": self.index, "role": self.role, "name": self.name, "text": self.text}

    def memory_fields(self) -> dict:
        """The fields the heuristic extractor gives the event memory of this message."""
        return {"summary": self.text, "speaker": self.name, "participants": self.participants}


class ChatGenerator:
    """Messages of one synthetic chat. `message(i)` is a pure function of (seed, i)."""

    def __init__(self, seed: int = 1):
        self.seed = seed
        rng = random.Random(seed)
        self.rare_en = _invented_words(rng, 20000, capitalise=True)
        self.oov = _invented_words(random.Random(seed + 1), 200, capitalise=False,
                                   exclude={w.lower() for w in self.rare_en})
        self.oov = [w + "ix" for w in self.oov]  # a suffix the rare pool never produces
        zh = set()
        while len(zh) < 5000:
            zh.add(rng.choice(_ZH_CHARS) + rng.choice(_ZH_CHARS))
        self.rare_zh = sorted(zh)
        # Each object has a home topic (place); 80% of a message's objects come from its topic.
        self.objects_of = [[] for _ in PLACES]
        self.topic_of_object = {}
        for i in range(len(OBJECTS)):
            t = rng.randrange(len(PLACES))
            self.objects_of[t].append(i)
            self.topic_of_object[i] = t
        for t, objs in enumerate(self.objects_of):
            if not objs:
                objs.append(rng.randrange(len(OBJECTS)))

    def _object(self, rng: random.Random, topic: int) -> int:
        if rng.random() < 0.8:
            return rng.choice(self.objects_of[topic])
        return rng.randrange(len(OBJECTS))

    def message(self, index: int) -> Message:
        rng = _seeded(self.seed, "msg", index)
        role = "user" if index % 2 == 0 else "assistant"
        name = PERSONA if role == "user" else rng.choice(CHARACTERS_EN[:6])
        topic = rng.randrange(len(PLACES))
        sentences, participants = [], {name} if role == "assistant" else set()
        rare = None
        obj_text = ""
        # Users write a line or two; the character writes a paragraph (one event memory either way,
        # as the heuristic extractor makes one per message up to extract.chunk_tokens).
        count = rng.choices((1, 2, 3), weights=(3, 4.5, 2.5))[0] if role == "user" else rng.randint(4, 12)
        rare_at = rng.randrange(count) if rng.random() < 0.6 else -1
        for s in range(count):
            zh = rng.random() < 0.2
            obj = self._object(rng, topic)
            chars = CHARACTERS_ZH if zh else CHARACTERS_EN
            a, b = rng.sample(chars, 2)
            lang = 1 if zh else 0
            slots = {"a": a, "b": b, "place": PLACES[topic][lang], "obj": OBJECTS[obj][lang],
                     "verb": rng.choice(VERBS)[lang], "adj": rng.choice(ADJECTIVES)[lang]}
            if s == rare_at:
                rare = rng.choice(self.rare_zh) if zh and rng.random() < 0.5 else rng.choice(self.rare_en)
                template = rng.choice(RARE_ZH if zh else RARE_EN)
                slots["rare"] = rare
            else:
                template = rng.choice(TEMPLATES_ZH if zh else TEMPLATES_EN)
            sentences.append(template.format(**slots))
            participants.update(n for key, n in (("a", a), ("b", b)) if "{" + key + "}" in template)
            if s == rare_at or not obj_text:
                obj_text = slots["obj"]
        text = " ".join(sentences)
        return Message(index, role, name, text, topic, sorted(participants), rare, obj_text)

    def chains(self, count: int, keep: set[int]) -> tuple[dict[int, str], str]:
        """Prefix chain hashes of messages 0..count-1 (as the extension computes them): those at
        `keep`, and the last one."""
        out, prev = {}, ""
        for i in range(count):
            m = self.message(i)
            prev = chain_hash(prev, message_hash(m.role, m.name, m.text))
            if i in keep:
                out[i] = prev
        return out, prev

    def queries(self, count: int, chat_size: int, salt: str) -> list[tuple[str, str, str | None]]:
        """`count` distinct (kind, query, rare name) triples: 'rare' shares a rare name with some
        memory, 'topic' uses common story words, 'miss' is small talk with words no memory has.
        About 20% Chinese."""
        rng = _seeded(self.seed, "queries", chat_size, salt)
        out: dict[str, tuple[str, str | None]] = {}
        while len(out) < count:
            roll = rng.random()
            zh = rng.random() < 0.2
            if roll < 0.4:
                msg = self.message(rng.randrange(max(chat_size - 10, 1)))
                if msg.rare is None:
                    continue
                if zh:
                    q = rng.choice(("{rare}和{obj}有什么关系？", "{rare}后来怎么样了？", "关于{rare}，我们知道些什么？"))
                else:
                    q = rng.choice(("What do we know about {rare}?", "Tell me again what {rare} had to do with "
                                    "the {obj}.", "Did {rare} ever come back?"))
                text, kind, name = q.format(rare=msg.rare, obj=msg.obj), "rare", msg.rare
            elif roll < 0.8:
                topic = rng.randrange(len(PLACES))
                lang = 1 if zh else 0
                slots = {"a": rng.choice(CHARACTERS_ZH if zh else CHARACTERS_EN), "place": PLACES[topic][lang],
                         "obj": OBJECTS[self._object(rng, topic)][lang], "adj": rng.choice(ADJECTIVES)[lang]}
                if zh:
                    q = rng.choice(("{a}在{place}做了什么？", "那件{adj}{obj}后来怎么样了？", "{place}的{obj}还在吗？"))
                else:
                    q = rng.choice(("Did {a} ever go back to the {place} for the {obj}?",
                                    "What happened to the {adj} {obj}?", "Who was at the {place} with {a}?"))
                text, kind, name = q.format(**slots), "topic", None
            else:
                q = rng.choice(SMALL_TALK_ZH if zh else SMALL_TALK_EN)
                text, kind, name = q.format(oov=rng.choice(self.oov)), "miss", None
            out.setdefault(text, (kind, name))
        return [(kind, text, name) for text, (kind, name) in out.items()]


class VectorModel:
    """A deterministic 384-d text embedder with clustered structure (see the module docstring).
    About 40 µs a text, so 100k memories take seconds instead of ~10 minutes with the real model."""

    SHARED = 0.75  # cosine of two unrelated texts, roughly as with multilingual-e5-small

    def __init__(self, gen: ChatGenerator, dim: int = DIM):
        self.dim = dim
        rng = np.random.default_rng(gen.seed)
        self.common = _unit(rng.standard_normal(dim))
        self.centroids = _unit(rng.standard_normal((len(PLACES), dim)))
        self.topic_of_token: dict[str, int] = {}
        for i, (en, zh) in enumerate(OBJECTS):
            for tok in tokenize(en) + tokenize(zh):
                self.topic_of_token.setdefault(tok, gen.topic_of_object[i])
        for t, (en, zh) in enumerate(PLACES):
            for tok in tokenize(en) + tokenize(zh):
                self.topic_of_token[tok] = t
        self.rare_tokens = {tok for w in gen.rare_en + gen.rare_zh for tok in tokenize(w)}
        self._tokens: dict[str, tuple[np.ndarray, float]] = {}

    def _token(self, tok: str) -> tuple[np.ndarray, float]:
        hit = self._tokens.get(tok)
        if hit is None:
            digest = hashlib.blake2b(tok.encode(), digest_size=8).digest()
            vec = np.random.default_rng(int.from_bytes(digest, "little")).standard_normal(self.dim)
            topic = self.topic_of_token.get(tok)
            if topic is not None:
                vec = 0.8 * self.centroids[topic] * np.sqrt(self.dim) + 0.6 * vec
            weight = 3.0 if tok in self.rare_tokens else 1.5 if topic is not None else 1.0
            hit = self._tokens[tok] = (_unit(vec), weight)
        return hit

    def embed(self, text: str) -> np.ndarray:
        toks = tokenize(text) or [text]
        parts = [self._token(t) for t in toks]
        body = _unit(np.sum([v * w for v, w in parts], axis=0))
        digest = hashlib.blake2b(b"noise:" + text.encode(), digest_size=8).digest()
        noise = _unit(np.random.default_rng(int.from_bytes(digest, "little")).standard_normal(self.dim))
        body = _unit(body + 0.35 * noise)
        return _unit(np.sqrt(self.SHARED) * self.common + np.sqrt(1 - self.SHARED) * body)


class BenchEmbedder(Embedder):
    """The sidecar's embedder in the benchmark: `VectorModel` for passages, precomputed vectors for
    the benchmark's queries, so recall timings exclude the query embedding by construction."""

    id = "bench:clustered-384"
    dim = DIM

    def __init__(self, model: VectorModel, queries: dict[str, np.ndarray] | None = None):
        self.model = model
        self.queries = dict(queries or {})
        self.query_misses = 0

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        return np.vstack([self.model.embed(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        vec = self.queries.get(text)
        if vec is None:
            self.query_misses += 1
            vec = self.model.embed(text)
        return vec


def sync_body(tail: list[Message], length: int, chain_at: dict[int, str]) -> dict:
    """A sync request as the extension builds it (tests/conftest.py:sync_body): a contiguous slice
    ending at `length - 1` plus the exponential prefix-chain anchors before it."""
    start = tail[0].index if tail else length
    anchors = {start - 1} if start > 0 else set()
    j = 0
    while length - 1 - (1 << j) >= 0:
        anchors.add(length - 1 - (1 << j))
        j += 1
    return {
        "length": length,
        "messages": [m.as_sync() for m in tail],
        "anchors": [{"index": i, "chain": chain_at[i]} for i in sorted(anchors) if 0 <= i < start],
    }


def anchor_indexes(length: int, start: int) -> set[int]:
    """The prefix indexes `sync_body` needs chains for."""
    out = {start - 1} if start > 0 else set()
    j = 0
    while length - 1 - (1 << j) >= 0:
        out.add(length - 1 - (1 << j))
        j += 1
    return {i for i in out if 0 <= i < start}
