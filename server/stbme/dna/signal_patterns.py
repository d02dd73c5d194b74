"""The words signals are found by: the DNA Memory plan's Chinese patterns, English equivalents, what marks
text as out of character, and what marks a plain line as an instruction to the story-teller.

Three groups of type patterns:
- `SIGNAL_PATTERNS`: the plan's Chinese patterns (verbatim, first) and English equivalents written for
  roleplay. Used on any text the chat's `dna.signal_scope` lets through.
- `INSTRUCTION_PATTERNS`: wider ones, used only on text already known to be addressed to the story-teller
  (out-of-character parts and plain commands). There a request ("please …", "could you …?", 请…, 可以…吗)
  is an instruction; its type is preference unless a more specific pattern says otherwise.
- `NARRATION_WORDS`: what a plain line must talk about to be a command to the story-teller rather than a
  line of the story: replies, narration, chapters, "my character" (strong), or the story, a scene, the
  ending (weak: a weak word counts only beside a decision, correction, error or workflow pattern).
"""

from __future__ import annotations

import re

SIGNAL_TYPES = ("correction", "preference", "decision", "error", "workflow")

# The seed's Chinese patterns (verbatim) followed by English equivalents of each.
SIGNAL_PATTERNS: dict[str, tuple[str, ...]] = {
    "correction": (
        r"不是.*?是",
        r"应该.*?而不是",
        r"错了.*?正确的是",
        # "not blue but green", "not Myra, it's Mira", "isn't her cousin, she's a neighbour"
        r"\b(?:not|\w+n't)\b[^.!?]{1,60}?(?:\bbut\b|[,;]\s*(?:it|that|he|she|they)(?:'s|'re| is| are)\b)",
        # "her eyes are green, not blue"
        r"\w[^.!?]{0,80}?,\s*not\s+(?:a |an |the )?\w+",
        # "it should be X, not / instead of / rather than Y"
        r"\bshould (?:be|have been|say|read)\b[^.!?]{1,80}?\b(?:not|instead of|rather than)\b",
        # "that's wrong, the correct one is …", "correction: …"
        r"\b(?:wrong|incorrect|mistaken)\b[^.!?]{0,60}?\b(?:correct|right one|actually|should be)\b",
        r"^\s*(?:correction|actually)\s*[:,]",
    ),
    "preference": (
        r"我(喜欢|偏好|希望|想要)",
        r"不要.*?",
        r"以后.*?",
        # "I want slower pacing", "I'd like you to …": about the story, not the character's wishes
        r"\bI(?:'d| would)?(?: really)? (?:like|love|prefer|want|wish|hope)\b[^.!?]{0,40}?\b(?:you to|story|scenes?|"
        r"pacing|pace|tone|style|repl(?:y|ies)|responses?|descriptions?|narration|dialogue|chapters?|plot|"
        r"romance|slower|faster|longer|shorter|more detail|less detail)\b",
        # "don't rush the romance", "stop writing for my character"
        r"\b(?:don'?t|do not|never|stop|avoid)\s+(?:\w+\s+){0,2}?(?:rush(?:ing)?|writ(?:e|ing)|describ(?:e|ing)|"
        r"narrat(?:e|ing)|us(?:e|ing)|add(?:ing)?|skip(?:ping)?|repeat(?:ing)?|speak(?:ing)?|talk(?:ing)? for|"
        r"act(?:ing)? for|decid(?:e|ing) for|control(?:ling)?|play(?:ing)?|summari[sz](?:e|ing))\b",
        r"\b(?:from now on|going forward|in (?:the )?future|henceforth|next time)\b",
    ),
    "decision": (
        r"决定.*?",
        r"选择.*?而不是",
        r"最终采用",
        # "we", not "I": "I decided to wait" is the user's character acting
        r"\b(?:we|let's|let us)(?:'ve| have|'re| are)? (?:decided|agreed|settled on|chose|choose|are going with|"
        r"going with)\b",
        r"\b(?:it'?s|it is|that'?s) (?:decided|settled|final)\b",
        r"\b(?:choose|chose|go with|went with|going with|pick|picked)\b[^.!?]{1,60}?\b(?:instead of|rather than|over)\b",
        r"\b(?:finally|in the end|ultimately),? (?:we(?:'ll| will)? )?(?:use|go with|adopt|pick)\b",
    ),
    "error": (
        r"失败.*?原因",
        r"错误.*?根因",
        r"踩坑",
        # "you keep forgetting she lost her arm"
        r"\byou(?:'ve| have)? (?:keep|kept|always|again|still) (?:forgetting|forget|getting|mixing|confusing|"
        r"ignoring|making|writing|saying|contradicting)\b",
        r"\byou(?:'ve| have)? (?:forgot(?:ten)?|ignored|contradicted|messed up|mixed up)\b",
        r"\b(?:fail(?:ed|s|ure)?|broke(?:n)?)\b[^.!?]{0,60}?\b(?:because|reason|cause)\b",
        r"\b(?:error|mistake|bug)\b[^.!?]{0,60}?\b(?:root cause|caused by|because)\b",
        r"\b(?:same mistake|pitfall|that mistake again)\b",
    ),
    "workflow": (
        r"先.*?再.*?",
        r"流程.*?",
        r"步骤.*?",
        # "first describe the scene, then the dialogue"
        r"\bfirst\b[^.!?]{1,80}?\b(?:then|after that|afterwards|next)\b",
        r"\b(?:workflow|routine|procedure|format)\b\s*(?:is|:|should)",
        r"\bsteps?\s*(?::|\d|one\b)|\bstep[- ]by[- ]step\b",
    ),
}

# Only in text addressed to the story-teller. A request is a preference unless a typed pattern matches.
_CLAUSE_START = r"(?:^|[,;:(]\s*|\band\s+|\bbut\s+|\bso\s+)"
INSTRUCTION_PATTERNS: dict[str, tuple[str, ...]] = {
    "correction": (
        r"^\s*(?:(?:small|tiny|quick|minor)\s+)?(?:fix|correction|continuity (?:note|fix)|retcon)\b\s*[:,]",
        r"\b(?:was|were|is|are) never\b",
        r"(?:^|[，,])\s*其实",
        r"[，,](?!\s*而)[^，,。；]{0,4}不是",
        r"^\s*(?:小)?(?:更正|修正|纠正|订正)|(?:更正|修正|纠正)\s*[:：一]",
        r"写错了|弄错了",
    ),
    "error": (
        # "you've got him climbing a wall": what the story-teller made a character do
        r"\byou(?:'ve| have)? (?:got|had|made) (?:him|her|them|me|us)\b",
        r"你(?:又|老是|总是|总|一直|还是)(?:把|忘|没|写|让|弄|搞|犯)|你(?:却|居然|竟然|怎么又)",
        r"你(?:忘了|忘记|忽略了|搞错|弄错|搞混|弄混|写错)",
        r"前后矛盾|自相矛盾|同样的错误|又犯了|搞混了|弄混了|搞错了",
    ),
    "decision": (
        r"\b(?:decided|decision|final answer|it'?s settled|settled)\s*[:：]",
        r"\blet'?s (?:decide|make|say|have)\b",
        r"\bwe(?:'re| are) (?:doing|skipping|keeping)\b",
        r"\bskip(?:s|ping)? (?:ahead|forward|to)\b|\btime[- ]?skip\b|跳到|跳过|快进",
        r"定了|定下来|说好了|就这么定|就选|选.{0,20}?而不是|就定为?|决定了",
    ),
    "workflow": (
        # a recurring step: "each reply, start with …", "add a summary at the end of every chapter"; not a
        # style ("write each reply longer" is a preference)
        r"\b(?:each|every)\s+(?:reply|response|message|post|turn|scene|chapter|day|time|fight|session|paragraph)\b"
        r"[^.!?]{0,40}?\b(?:start|begin|open|end|close|add|include|give|sum|recap|tell|list)\b",
        r"\b(?:start|begin|open|end|close|add|include|give|sum|recap|tell|list)\b[^.!?]{0,60}?"
        r"\b(?:each|every)\s+(?:reply|response|message|post|turn|scene|chapter|day|fight|session|paragraph)\b",
        r"\b(?:whenever|each time|every time)\b",
        r"\bat the (?:start|end|beginning) of (?:each|every)\b",
        r"\bwhen\b[^.!?]{1,60}?,\s*(?:always\s+)?(?:give|add|write|describe|start|begin|open|put|include|show|tell)\b",
        r"\b(?:start|begin|open)\b[^.!?]{0,60}?\bwith\b[^.!?]{0,80}?\bthen\b",
        r"\b(?:before|after) (?:each|every)\b",
        r"(?:每[^，,。；]{0,4}(?:次|段|天|章|回|场|轮)|每当)[^。；]{0,20}?(?:先|开头|结尾|加上|交代|总结|告诉|列出)",
        r"(?:时|的时候)[，,]?\s*先|开头先|先.{1,30}?然后|按步骤",
        r"格式\s*[:：]",
    ),
    "preference": (
        _CLAUSE_START + r"(?:please|pls|kindly|could you|can you|would you|will you|can we|could we|"
        r"i'?d (?:like|love|prefer|rather)|i (?:want|prefer)|make sure|keep|stop|don'?t|do not|never|always|"
        r"avoid|use|try to|remember (?:to|that)|no more|less|more|let'?s not)\b",
        r"\bplease\b|\bwould be (?:great|nice|better|good|appreciated)\b",
        # "could Elena swear a bit less?": a request, asked as a question
        r"^\s*(?:could|can|would|will|may)\s+\w+[^.!?]{0,80}\?|\ba (?:bit|little|lot) (?:more|less)\b",
        r"请(?!问|客|假|教)|可以.{0,12}吗|能不能|能否|可不可以|麻烦|希望|想要|别|避免|保持|尽量|千万|"
        r"一定要|必须|少用|多用|多写|少写|多一[点些]|少一[点些]|一点(?:吧|儿)?(?=[，,。！!？?]|$)",
    ),
}

# Out-of-character text. Paired forms: (OOC: …), [OOC …], ((…)), （OOC：…）, （（…））, each an opener and
# the first closer after it (found by a forward scan, never a lazy match to the end: a message of many
# unclosed openers stays linear). Line forms: // … to the end of the line, a line opened with OOC:.
# Group 1 of a line form is the inner text.
OOC_PAIRS = (
    (re.compile(r"[(\[（【][ \t]*OOC\b[ \t]*[:：\-–]?", re.I), re.compile(r"[)\]）】]")),
    (re.compile(r"\(\("), re.compile(r"\)\)")),
    (re.compile(r"（（"), re.compile(r"））")),
)
OOC_LINES = (
    re.compile(r"(?:^|(?<=\s))//+[ \t]*(.+?)[ \t]*$", re.M),
    re.compile(r"^[ \t]*OOC[ \t]*[:：\-–][ \t]*(.+?)[ \t]*$", re.M | re.I),
)

# A plain line opened like this is addressed to the story-teller.
NARRATOR_ADDRESS = re.compile(
    r"^\s*(?:(?:small|tiny|quick|minor)\s+)?(?:correction|fix|note|reminder|author'?s note|narrator|gm|dm|"
    r"storyteller|system)\s*[:,]|^\s*(?:小)?(?:更正|修正|纠正|订正|备注|提醒|注意|旁白|作者)\s*[:：一]", re.I)
# Dialogue or action markup: a line with it is part of the story.
STORY_MARKUP = re.compile(r"[\"“”「」『』]|\*[^*\n]+\*")
STRONG_NARRATION_WORDS = re.compile(
    r"\b(?:repl(?:y|ies)|responses?|narrat(?:e|es|ion|or|ing)|paragraphs?|\d+ words|word count|"
    r"(?:first|second|third)[- ]person|pov|point of view|tense|tone|pacing|prose|chapters?|timeline|"
    r"my (?:character|char|persona)|the characters?|character'?s|dialogue|descriptions?|roleplay|rp|"
    r"cliffhangers?|format(?:ting)?|\{\{(?:user|char)\}\})\b"
    r"|回复|描写|描述|人称|文风|节奏|章|段落|每段|[一二两三四五六七八九十\d]段(?!路|时间|日子)|字以内|百字|字数|时间线|"
    r"角色|台词|对白|旁白|叙述|格式|心理活动|戏份|前情|剧情|情节|多写|少写|先写|再写|来写|写成|写得|改写|别写|不要写",
    re.I)
WEAK_NARRATION_WORDS = re.compile(
    r"\b(?:story|storyline|plot|scenes?|ending|villain|hero|protagonist|antagonist|side character|love interest|"
    r"arc|setting|twist|reveal)\b|故事|场景|结局|反派|配角|主角|设定|感情线|伏笔|开头|结尾", re.I)

EMPHASIS_WORDS = ("一定", "必须", "绝对", "永远", "记住",
                  "always", "must", "absolutely", "definitely", "remember", "make sure", "important")
NEGATION_WORDS = ("不要", "别", "don't", "dont", "do not", "never", "stop")
# An instruction that opens with a prohibition is a preference, not a workflow or a decision ("no more
# cliffhangers at the end of every reply", 以后不要每段都用问句结尾, 请不要替我的角色做决定).
PROHIBITION = re.compile(
    r"^\s*(?:from now on,?\s*)?(?:please\s+)?(?:don'?t|do not|no more|stop|never|avoid)\b"
    r"|^\s*(?:以后|今后|从现在起)?[，,]?\s*(?:请)?(?:不要|别|不用|避免)", re.I)
