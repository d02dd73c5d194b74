"""What a name looks like in Chinese text, where no capital letter marks one: a transliterated name, its parts
joined by an interpunct, and a name before a title or a place word. The heuristic write path makes anchors of
them (pipeline/heuristic.py); attribution leaves them out where the speaker only addresses someone
(graph/attribution.py)."""

from __future__ import annotations

import re

# The characters transliteration uses, so the words around a name ("导演是", "等") are not taken into it.
_SOUNDS = ("阿埃艾爱安昂奥澳巴拜班邦包保鲍贝本比彼毕宾滨波玻伯勃博布查柴彻楚茨达戴黛丹德登狄迪蒂帝丁东杜多朵俄厄"
           "恩尔法凡范菲费芬丰冯佛弗伏福富盖甘冈高戈哥格根贡古瓜圭果哈海汉翰豪赫黑亨洪胡华怀惠霍基吉加佳贾杰捷金"
           "津居君喀卡凯坎康考柯科克肯孔库夸奎昆拉腊莱赖兰朗劳勒雷蕾黎里理丽利莉连莲廉林琳玲凌留柳龙隆娄卢鲁陆路"
           "伦罗洛吕马玛迈麦曼芒毛茂梅美门蒙孟米密敏明摩莫墨默姆木穆纳娜乃奈南楠瑙内妮尼涅宁纽努诺欧帕派潘庞佩彭"
           "皮珀坡普齐奇契恰乔切钦琴琼丘屈让热瑞若撒萨塞赛桑瑟森沙莎山珊尚绍舍申什施史舒斯思松苏索塔泰坦汤唐陶特"
           "提汀廷通图托瓦娃万旺威韦维温文沃乌伍武西希锡夏谢欣辛休修徐雅亚扬杨耶叶伊依因英尤约泽扎詹哲珍朱卓兹佐"
           "腾列歌丝芙薇琪茜赞迦斐罕娅妲蔻缇裴席芭葛歇治雯白堡得钱夫迭蓉当卫平柏秋邓汗钟李儿大")
# A transliterated name: "莱昂纳多·迪卡普里奥", "汤姆·汉克斯". 得 ends names (彼得) but begins none: in "觉得凯莉·华"
# it belongs to 觉得.
DOTTED_NAME = re.compile(rf"(?!得)[{_SOUNDS}]{{1,6}}(?:[·・•][{_SOUNDS}]{{1,8}}){{1,3}}")

# Characters no name is made of: pronouns, particles, verbs of going, place words ("这家公司", "我回公司",
# "北京市东城区" hold no name).
NOT_IN_NAMES = ("这那哪每各某你我他她它们的地得了着过是在有和与及或从到去回来向往把被给对将就都也又还很太最更个之全些市省县区"
                "這們與從來給對將還個縣區過著")   # ... and the traditional forms of those that have one
_NAME_CHARS = rf"(?<![这那哪每某各有這])(?:(?![{NOT_IN_NAMES}])[\u4e00-\u9fff]){{1,2}}"
PERSON_TITLES = "先生|小姐|女士|夫人|大人|殿下|陛下|老师|老師|队长|隊長"
# 城 is no suffix where it begins another word (城堡, 城楼, 城区, 城隍, 城墙: "林晚在城隍庙").
_PLACE_WORDS = "王国|王國|帝国|帝國|城(?![堡楼區区隍墙牆])|村|镇|鎮|学院|學院|公司|小队|小隊|军团|軍團|森林|神殿"
# One or two characters of a name and a title or a place word: "张先生", "李小姐", "灰石城". Not after a
# demonstrative or 有 ("有限公司").
TITLED_NAME = re.compile(rf"{_NAME_CHARS}(?:{PERSON_TITLES}|{_PLACE_WORDS})")
# ... of a person only: "张先生", "王队长".
TITLED_PERSON = rf"{_NAME_CHARS}(?:{PERSON_TITLES})"
