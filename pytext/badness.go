package pytext

import (
	"regexp"
	"strings"
)

// mojibakeCategories are ftfy's badness.MOJIBAKE_CATEGORIES: groups of the
// few hundred characters that UTF-8 mojibake is made of, written as bodies
// of regexp character classes ('-' between two characters is a range).
var mojibakeCategories = map[string]string{
	"common":            "\u00a0\u00ad·´–—―…’",
	"c1":                `\x{80}-\x{9f}`,
	"bad":               "¦¤¨¬¯¸ƒˆˇ˘˛˜†‡‰⌐◊\ufffdªº",
	"law":               "¶§",
	"currency":          "¢£¥₧€",
	"start_punctuation": "¡«¿©΄΅‘‚“„•‹\uf8ff",
	"end_punctuation":   "®»˝”›™",
	"numeric":           "²³¹±¼½¾×µ÷⁄∂∆∏∑√∞∩∫≈≠≡≤≥№",
	"kaomoji":           "Ò-ÖÙ-Üò-öø-üŐŌŪŲ°",
	"upper_accented":    "À-ÑØÜÝĂĀĄĆČĎĐĘĚĒĖĞĢİĪĶĹĽŁĻŃŇŅŒŘŚŞŠŢŤŮŰŸŹŻŽҐ",
	"lower_accented":    "ßà-ñăąāćčďđęěēėğģįīķĺľłļœŕśşšťüźżžґﬁﬂ",
	"upper_common":      "ÞΑ-ΩΆΈΉΊΌΎΏΪΫЁ-Я",
	"lower_common":      "α-ωάέήίΰа-џ",
	"box":               "│┌┐┘├┤┬┼═-╬▀▄█▌▐░▒▓",
}

// badnessAlternatives is ftfy's BADNESS_RE, one alternative a line, with
// the whitespace its verbose pattern ignores taken out (a space inside
// brackets is a real space there and here). {name} stands for a category;
// \s and \w are Python's, replaced below.
var badnessAlternatives = []string{
	`[{c1}]`,
	`[{bad}{lower_accented}{upper_accented}{box}{start_punctuation}{end_punctuation}{currency}{numeric}{law}][{bad}]`,
	`[a-zA-Z][{lower_common}{upper_common}][{bad}]`,
	`[{bad}][{lower_accented}{upper_accented}{box}{start_punctuation}{end_punctuation}{currency}{numeric}{law}]`,
	`[{lower_accented}{lower_common}{box}{end_punctuation}{currency}{numeric}][{upper_accented}]`,
	`[{box}{end_punctuation}{currency}{numeric}][{lower_accented}]`,
	`[{lower_accented}{box}{end_punctuation}][{currency}]`,
	`\s[{upper_accented}][{currency}]`,
	`[{upper_accented}{box}][{numeric}{law}]`,
	`[{lower_accented}{upper_accented}{box}{currency}{end_punctuation}][{start_punctuation}][{numeric}]`,
	`[{lower_accented}{upper_accented}{currency}{numeric}{box}{law}][{end_punctuation}][{start_punctuation}]`,
	`[{currency}{numeric}{box}][{start_punctuation}]`,
	`[a-z][{upper_accented}][{start_punctuation}{currency}]`,
	`[{box}][{kaomoji}]`,
	`[{lower_accented}{upper_accented}{currency}{numeric}{start_punctuation}{end_punctuation}{law}][{box}]`,
	`[{box}][{end_punctuation}]`,
	`[{lower_accented}{upper_accented}][{start_punctuation}{end_punctuation}]\w`,
	`[Œœ][^A-Za-z]`,
	`[{upper_accented}]°`,
	`[ÂÃÎÐ][€œŠš¢£Ÿž\xa0\xad®©°·»{start_punctuation}{end_punctuation}–—´]`,
	`×[²³]`,
	`[ØÙ][{common}{currency}{bad}{numeric}{start_punctuation}ŸŠ®°µ»][ØÙ][{common}{currency}{bad}{numeric}{start_punctuation}ŸŠ®°µ»]`,
	`à[²µ¹¼½¾]`,
	`√[±∂†≠®™´≤≥¥µø]`,
	`≈[°¢]`,
	`‚Ä[ìîïòôúùû†°¢π]`,
	`‚[âó][àä°ê]`,
	`вЂ`,
	`[ВГРС][{c1}{bad}{start_punctuation}{end_punctuation}{currency}°µ][ВГРС]`,
	`ГўВЂВ.[A-Za-z ]`,
	`Ã[\xa0¡]`,
	`[a-z]\s?[ÃÂ][ ]`,
	`^[ÃÂ][ ]`,
	`[a-z.,?!{end_punctuation}]Â[ {start_punctuation}{end_punctuation}]`,
	`β€[™\xa0Ά\xad®°]`,
	`[ΒΓΞΟ][{c1}{bad}{start_punctuation}{end_punctuation}{currency}°][ΒΓΞΟ]`,
	`ā€`,
}

// badnessRE is BADNESS_RE for Go's regexp. It has no lookaround, so RE2
// finds a match exactly when Python's re does; '.' and '^' mean the same
// in both without flags, and [^...] matches '\n' in both.
var badnessRE = regexp.MustCompile(badnessPattern())

func badnessPattern() string {
	pairs := []string{`\s`, "[" + pySpaceClass + "]", `\w`, "[" + pyWordClass + "]"}
	for name, chars := range mojibakeCategories {
		pairs = append(pairs, "{"+name+"}", chars)
	}
	return strings.NewReplacer(pairs...).Replace(strings.Join(badnessAlternatives, "|"))
}

// isBad is ftfy.badness.is_bad: whether the text has a sequence that is
// much more likely mojibake than meant.
func isBad(s string) bool { return badnessRE.MatchString(s) }
