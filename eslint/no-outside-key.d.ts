import type { Rule } from 'eslint';

/** The rule of eslint/no-outside-key.js (its type, for the test that runs it). */
export declare const noOutsideKey: Rule.RuleModule;
