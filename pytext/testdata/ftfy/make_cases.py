#!/usr/bin/env python3
"""Write cases.json (and isbad.json) for pytext's ftfy tests.

    python3 make_cases.py /path/to/ftfy-checkout   # the folder holding ftfy/

Each case is {"in": text, "want": ftfy.fix_text(text)} with ftfy's default
configuration; isbad.json holds {"in": text, "bad": ftfy.badness.is_bad(text)}.
The inputs are built here, deterministically: mojibake made by encoding real
text as UTF-8 and decoding it with each codec ftfy tries, variants of it
(double mojibake, lost bytes, spaces for U+00A0, mixed with good text, in
HTML), text that must stay as it is, and random strings of the characters
mojibake is made of.
"""

import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

TEXTS = [
    "café crème brûlée à la carte",
    "naïve résumé, déjà vu, façade",
    "Größenwahn und Übermut: schön, süß, Straße",
    "Où est la bibliothèque ? Ça va très bien, merci.",
    "¿Qué tal? ¡Mañana será otro día, señor Muñoz!",
    "Zażółć gęślą jaźń — Łódź, Kraków, Gdańsk",
    "Příliš žluťoučký kůň úpěl ďábelské ódy",
    "İstanbul'da çok güzel bir gün, Işık ağaçların üstünde",
    "Ελληνικά: καλημέρα κόσμε, ευχαριστώ πολύ",
    "Привет, мир! Съешь же ещё этих мягких французских булок",
    "Українська мова: їжак, ґанок, єнот",
    "مرحبا بالعالم، هذه تجربة",
    "नमस्ते दुनिया, यह एक परीक्षण है",
    "日本語のテキスト、東京都",
    "中文测试：你好，世界！",
    "한국어 텍스트 테스트",
    "emoji: 😀 🎉 👍🏽 🇫🇷 ❤️ ✔",
    "He said “hello” — and she said ‘goodbye’… €5 ™ © ®",
    "prices: 5 € – 10 £ – 2 ¥; 50% off • 3×4 ± 2°",
    "Ærøskøbing på Ærø; Åland; ØRESUND",
    "Tiếng Việt có dấu: Hà Nội, Sài Gòn",
    "Português: ação, coração, às vezes, àquele lugar",
    "Català: fàcil, però, i també",
    "Mötley Crüe — Beyoncé — Zoë — Noël",
    "Latvian: ģimene, ķēķis; Lithuanian: ąžuolas, ėjo",
    "Română: știință, țară, împreună",
    "Magyar: árvíztűrő tükörfúrógép",
    "Svenska: räksmörgås; Norsk: blåbærsyltetøy",
    "½ cup of sugar, ¼ tsp salt, 2³ = 8",
    "A cat wearing a hat, 4k, ultra detailed — cinematic lighting",
    "Crème fraîche «maison» et œufs brouillés",
    "Dürüm döner, Köln–Düsseldorf",
    "© 2024 Ürün™ • Tüm hakları saklıdır",
    "Ёжик в тумане — «сказка»",
    "Αθήνα – Θεσσαλονίκη: 500 χλμ.",
    "El niño comió piñas en la montaña",
    "The Ω symbol, the µ prefix and the ∑ operator",
    "Smörgåsbord – Köttbullar – Lingon",
    "Ça coûte 3 000 € – c'est trop cher !",
    "zürich, genève, neuchâtel",
]

CHARMAPS = [
    "latin-1",
    "sloppy-windows-1252",
    "sloppy-windows-1251",
    "sloppy-windows-1250",
    "sloppy-windows-1253",
    "sloppy-windows-1254",
    "sloppy-windows-1257",
    "iso-8859-2",
    "macroman",
    "cp437",
]

UNCHANGED = [
    "Charlotte Brontë…”",
    "AHÅ™, the new sofa from IKEA®",
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，JPEG压缩残留，丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，手指融合，静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走",
    "A cat walks on the grass, realistic",
    "Ａ ｆｕｌｌｗｉｄｔｈ ｐｒｏｍｐｔ",
    "(╯°□°)╯︵ ┻━┻",
    "¯\\_(ツ)_/¯",
    "Café del Mar",
    "I ♥ NY",
    "ÀÁÂÃÄÅ",
    "Ω≈ç√∫˜µ≤≥÷",
    "Pérez, José — 3°C",
]

DOCSTRINGS = [
    "âœ” No problems",
    "sÃ³",
    "voilÃ le travail",
    "schÃ¶n",
    "&macr;\\_(ã\x83\x84)_/&macr;",
    "Broken text&hellip; it&#x2019;s ﬂubberiﬁc!",
    "ＬＯＵＤ　ＮＯＩＳＥＳ",
    "Ã³",
    "&ATILDE;&SUP3;",
    "â€œ like this â€\ufffd",
    "doesnâ€™t",
    "The Mona Lisa doesnÃƒÂ¢Ã¢â€šÂ¬Ã¢â€žÂ¢t have eyebrows.",
    "l'humanitÃ©",
    "Ã\xa0 la mode",
    "Ã la mode",
    "fÃ cil",
    "Ã s vezes",
    "Ã quele lugar",
    "ÃƒÂ©",
    "Ð¿Ñ€Ð¸Ð²ÐµÑ‚",
    "ГўВЂВ™t",
    "вЂњquotedвЂќ",
    "ÐÐ°ÑÐ°Ð»Ð¾",
    "#Ã¡mame",
    "Ã¡Ã©Ã­Ã³Ãº",
    "ÃºltimÃ¡",
    "P&EACUTE;REZ",
    "caf\x82 au lait",
    "\x93quoted\x94 and \x85 and \x80",
    "a\x81b\x8dc\x8fd\x90e\x9d",
    "\x80\x81",
    "Ã\x81",
    "here comes a null! À\x80",
    "À\n",
    "xÃ©À\n",
    "Ã©í ½í²©",
    "í ½í²© emoji",
]


def mojibake(text, codec):
    return text.encode("utf-8").decode(codec)


def variants(rng):
    out = []
    for t in TEXTS:
        for codec in CHARMAPS:
            out.append(mojibake(t, codec))
        # Lossy: plain windows-1252 turns its undefined bytes into U+FFFD.
        lossy = t.encode("utf-8").decode("windows-1252", errors="replace")
        out.append(lossy)
        out.append(lossy.replace("\ufffd", "?"))
        m = mojibake(t, "sloppy-windows-1252")
        out.append(m.replace("\xa0", " "))
        out.append(mojibake(m, "sloppy-windows-1252"))  # double
        out.append(mojibake(mojibake(t, "latin-1"), "sloppy-windows-1252"))
        out.append(t + " / " + m)  # mixed good text and mojibake
        out.append("&lt;" + m + "&gt; &amp; caf&eacute;")
    return out


def html_cases():
    m = mojibake("café “crème” — déjà", "sloppy-windows-1252")
    return [
        "caf&eacute; sch&Atilde;&para;n",
        "&Atilde;&copy;t&Atilde;&copy;",
        "<p>" + m + " &amp; friends</p>",
        m + " &amp; friends\n<b>" + m + "</b>\n" + m + " &eacute;",
        "&#195;&#169;",
        "&#x00E2;&#x0080;&#x0099;",
        "it&#8217;s " + m,
    ]


def multiline(rng):
    out = []
    for _ in range(20):
        lines = []
        for _ in range(rng.randint(2, 5)):
            t = rng.choice(TEXTS)
            lines.append(rng.choice([t, mojibake(t, rng.choice(CHARMAPS))]))
        sep = rng.choice(["\n", "\r\n", "\n\n"])
        out.append(sep.join(lines))
    return out


def random_strings(rng, pool, n):
    out = []
    for _ in range(n):
        k = rng.randint(1, 12)
        out.append("".join(rng.choice(pool) for _ in range(k)))
    return out


def char_pool():
    from ftfy import badness, chardata

    chars = set("abcxyz AZ.,?!-'\"\n")
    for v in list(badness.MOJIBAKE_CATEGORIES.values()) + list(chardata.UTF8_CLUES.values()):
        chars.update(v.replace("-", ""))
    for codec in CHARMAPS:
        chars.update(bytes(range(0x80, 0x100)).decode(codec))
    chars.update("\x1a\ufffdéœ€™…–—“”‘’ÃÂâ€ĂÐÑØÙВГРСΒΓΞΟβāàá")
    return sorted(chars)


def main():
    sys.path.insert(0, sys.argv[1])
    import ftfy
    import ftfy.badness

    assert ftfy.__version__ == "6.3.1", ftfy.__version__
    rng = random.Random(20240611)
    inputs = DOCSTRINGS + UNCHANGED + variants(rng) + html_cases() + multiline(rng)
    pool = char_pool()
    inputs += random_strings(rng, pool, 400)
    # Random runs of UTF-8 mojibake pieces: lead-like and continuation-like
    # characters, with spaces and '?' between.
    pieces = [mojibake(c, codec) for c in "éàü€“”—…ñçøæßπ😀ё" for codec in CHARMAPS]
    for _ in range(200):
        inputs.append("".join(rng.choice(pieces + [" ", "?", "\ufffd", "a", "\xa0"]) for _ in range(rng.randint(1, 6))))
    seen, cases = set(), []
    for s in inputs:
        if s in seen:
            continue
        seen.add(s)
        cases.append({"in": s, "want": ftfy.fix_text(s)})
    with open(os.path.join(HERE, "cases.json"), "w") as f:
        json.dump(cases, f, indent=0)
        f.write("\n")
    bad = [{"in": s, "bad": ftfy.badness.is_bad(s)} for s in random_strings(rng, pool, 500) + inputs[:200]]
    with open(os.path.join(HERE, "isbad.json"), "w") as f:
        json.dump(bad, f, indent=0)
        f.write("\n")
    print(len(cases), "cases;", sum(c["in"] != c["want"] for c in cases), "changed;", len(bad), "is_bad cases")


if __name__ == "__main__":
    main()
